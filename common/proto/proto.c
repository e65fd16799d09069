/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "proto.h"

#include <errno.h>
#include <string.h>

typedef struct MsgRow {
	const char *name;
	const char *fields;
	MsgDir dir;
} MsgRow;

static const MsgRow msg_rows[_MSG_TYPE_MAX] = {
#define F MSG_FIELD_SCHEMA
#define MSG(n, id, d, f) [id] = {#n, "" f, MSGDIR_##d},
#include "messages.def"
#undef MSG
#undef F
};

bool
msg_type_valid(int type)
{
	return type > 0 && type < _MSG_TYPE_MAX && msg_rows[type].name != NULL;
}

const char *
msg_type_name(int type)
{
	return msg_type_valid(type) ? msg_rows[type].name : NULL;
}

const char *
msg_type_fields(int type)
{
	if (!msg_type_valid(type))
		return NULL;
	const char *f = msg_rows[type].fields;
	return f[0] ? f + 2 : f; /* less the first ", " */
}

MsgDir
msg_type_dir(int type)
{
	return msg_type_valid(type) ? msg_rows[type].dir : MSGDIR_ANY;
}

static const char *const role_names[_ROLE_MAX] = {
    [ROLE_ROUTER] = "routerd",
    [ROLE_COORD] = "coordinatord",
    [ROLE_SHIM] = "containerd-shim",
    [ROLE_CLIENT] = "client",
};

const char *
peer_role_name(PeerRole role)
{
	return (unsigned)role < _ROLE_MAX ? role_names[role] : "unknown";
}

int
peer_role_from_name(const char *name)
{
	for (int i = 0; i < _ROLE_MAX; i++)
		if (strcmp(role_names[i], name) == 0)
			return i;
	return -EINVAL;
}

/* The ALLOW rows of messages.def: [type][from][to]. */
static const bool msg_extra_allowed[_MSG_TYPE_MAX][_ROLE_MAX][_ROLE_MAX] = {
#define F(type, name, req)
#define MSG(n, id, d, f)
#define ALLOW(n, from, to) [MSG_##n][ROLE_##from][ROLE_##to] = true,
#include "messages.def"
#undef ALLOW
#undef MSG
#undef F
};

bool
msg_allowed(int type, PeerRole from, PeerRole to)
{
	if (!msg_type_valid(type) || (unsigned)from >= _ROLE_MAX || (unsigned)to >= _ROLE_MAX)
		return false;
	if (msg_extra_allowed[type][from][to])
		return true;
	switch (msg_rows[type].dir) {
	case MSGDIR_ANY: return true;
	case MSGDIR_ROUTER_TO_COORD: return from == ROLE_ROUTER && to == ROLE_COORD;
	case MSGDIR_COORD_TO_ROUTER: return from == ROLE_COORD && to == ROLE_ROUTER;
	case MSGDIR_COORD_TO_SHIM: return from == ROLE_COORD && to == ROLE_SHIM;
	case MSGDIR_SHIM_TO_COORD: return from == ROLE_SHIM && to == ROLE_COORD;
	case MSGDIR_CLIENT_TO_COORD: return from == ROLE_CLIENT && to == ROLE_COORD;
	}
	return false;
}
