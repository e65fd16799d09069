/* SPDX-License-Identifier: MIT */
/*
 * proto.h — the message table expanded: the MsgType enum, names, directions.
 *
 * Wire format (docs/PROTOCOL.md): every frame is a 4-byte big-endian length N
 * followed by N bytes holding one msgpack array [type:uint, req_id:uint, body:map].
 * req_id 0 marks a push (no reply expected); a request's reply is a REPLY or
 * ERROR frame carrying the same req_id.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define RW_PROTO_VERSION 1

typedef enum MsgType {
#define F(type, name, req)
#define MSG(name, id, dir, fields) MSG_##name = id,
#include "messages.def"
#undef MSG
#undef F
	_MSG_TYPE_MAX,
	_MSG_TYPE_INVALID = -22, /* -EINVAL */
} MsgType;

typedef enum MsgDir {
	MSGDIR_ANY,
	MSGDIR_ROUTER_TO_COORD,
	MSGDIR_COORD_TO_ROUTER,
	MSGDIR_COORD_TO_SHIM,
	MSGDIR_SHIM_TO_COORD,
	MSGDIR_CLIENT_TO_COORD,
} MsgDir;

typedef enum PeerRole {
	ROLE_ROUTER,
	ROLE_COORD,
	ROLE_SHIM,
	ROLE_CLIENT, /* tests, tools */
	_ROLE_MAX,
} PeerRole;

/* Name of a message type ("RUN_START"), or NULL when type is not in the table. */
const char *msg_type_name(int type);
/* The schema text of one F(TYPE, name, REQ|OPT) row of messages.def:
 * ", name:type" with a "?" when optional. A row's schema is the concatenation
 * of its fields' ("" F(…) F(…)), less the leading ", ". */
#define MSG_FIELD_SCHEMA(type, name, req) ", " #name ":" MSG_SCHEMA_##type MSG_SCHEMA_##req
#define MSG_SCHEMA_STR "str"
#define MSG_SCHEMA_BIN "bin"
#define MSG_SCHEMA_INT "int"
#define MSG_SCHEMA_UINT "uint"
#define MSG_SCHEMA_BOOL "bool"
#define MSG_SCHEMA_STRV "[str]"
#define MSG_SCHEMA_RAW "any"
#define MSG_SCHEMA_REQ ""
#define MSG_SCHEMA_OPT "?"

/* Field schema of a type ("run_id:str, thread_id:str?", "" for an empty
 * body), or NULL. Generated from messages.def; for logs and tools. */
const char *msg_type_fields(int type);
/* Direction of a type; MSGDIR_ANY for unknown. */
MsgDir msg_type_dir(int type);
/* true when type is a row of messages.def. */
bool msg_type_valid(int type);

const char *peer_role_name(PeerRole role);
/* "routerd" → ROLE_ROUTER …; -EINVAL when unknown. */
int peer_role_from_name(const char *name);
/* May a peer of role `from` send `type` to a peer of role `to`? The row's
 * direction, or an ALLOW row of messages.def; nothing else (a client gets
 * only what ALLOW rows give it). */
bool msg_allowed(int type, PeerRole from, PeerRole to);
