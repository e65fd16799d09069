/* SPDX-License-Identifier: MIT */
/*
 * cluster-msg.c — what one RW_RUNS message holds: one or more consecutive
 * events of a run (docs/CLUSTER.md "What is kept in JetStream").
 *
 * One event: header Rw-Seq (its seq) and the event's bytes as the payload, as
 * every message was before batches were packed. More: headers Rw-First (the
 * first one's seq) and Rw-Count, and the events in order as netstrings,
 * "<len>:<bytes>,", so any bytes may be an event. A packed message has no
 * Rw-Seq on purpose: a reader from before packing refuses it ("a message
 * without Rw-Seq") rather than show the netstrings as one event. A
 * commit's events of one run go as few messages as the server's maximum
 * payload allows: one fenced round trip each, where one message per event
 * took one round trip per event (the fence chains a message to the stream
 * sequence of the one before it, so a run's messages cannot be pipelined).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-internal.h"

static size_t
digits(size_t x)
{
	size_t d = 1;
	while (x >= 10) {
		x /= 10;
		d++;
	}
	return d;
}

static size_t
framed(size_t len)
{
	return digits(len) + len + 2; /* "<len>:" ... "," */
}

size_t
cluster_msg_fit(const ClusterEvent *ev, size_t n, size_t max_bytes)
{
	size_t m = 1, bytes;
	if (n == 0)
		return 0;
	bytes = framed(ev[0].len);
	while (m < n && m < CLUSTER_MSG_MAX_EVENTS && bytes + framed(ev[m].len) <= max_bytes)
		bytes += framed(ev[m++].len);
	return m;
}

int
cluster_msg_pack(const ClusterEvent *ev, size_t m, char **ret, size_t *ret_len)
{
	size_t total = 0;
	for (size_t k = 0; k < m; k++)
		total += framed(ev[k].len);
	char *buf = malloc(total + 1), *p = buf;
	if (!buf)
		return -ENOMEM;
	for (size_t k = 0; k < m; k++) {
		p += sprintf(p, "%zu:", ev[k].len);
		memcpy(p, ev[k].data, ev[k].len);
		p += ev[k].len;
		*p++ = ',';
	}
	*ret = buf;
	*ret_len = total;
	return 0;
}

int
cluster_msg_unpack(const void *data, size_t len, size_t count, ClusterEvent *out)
{
	const char *p = data, *end = p + len;
	if (count == 1) {
		out[0] = (ClusterEvent){data, len};
		return 0;
	}
	for (size_t k = 0; k < count; k++) {
		size_t n = 0, nd = 0;
		while (p < end && *p >= '0' && *p <= '9' && nd < 10) {
			n = n * 10 + (size_t)(*p++ - '0');
			nd++;
		}
		if (nd == 0 || p == end || *p++ != ':' || (size_t)(end - p) < n + 1 || p[n] != ',')
			return -EBADMSG;
		out[k] = (ClusterEvent){p, n};
		p += n + 1;
	}
	return p == end ? 0 : -EBADMSG;
}

int
cluster_header_u64(natsMsg *m, const char *name, uint64_t *ret)
{
	const char *v = NULL;
	char *end;
	if (natsMsgHeader_Get(m, name, &v) != NATS_OK || !v || !*v)
		return -ENOENT;
	errno = 0;
	*ret = strtoull(v, &end, 10);
	return *end || errno ? -EBADMSG : 0;
}

int
cluster_msg_span(natsMsg *m, uint64_t *first_seq, uint64_t *count)
{
	*count = 1;
	int r = cluster_header_u64(m, CLUSTER_HDR_SEQ, first_seq);
	if (r == -ENOENT && (r = cluster_header_u64(m, CLUSTER_HDR_FIRST, first_seq)) == 0)
		r = cluster_header_u64(m, CLUSTER_HDR_COUNT, count);
	return r < 0 ? -EBADMSG : 0;
}

int
cluster_msg_events(natsMsg *m, uint64_t *first_seq, ClusterEvent **ret, size_t *ret_n)
{
	uint64_t count;
	int r = cluster_msg_span(m, first_seq, &count);
	if (r < 0)
		return r;
	int len = natsMsg_GetDataLength(m);
	size_t dl = len > 0 ? (size_t)len : 0;
	/* each packed event takes at least "0:," */
	if (count == 0 || count > CLUSTER_MSG_MAX_EVENTS || (count > 1 && count > dl / 3))
		return -EBADMSG;
	ClusterEvent *ev = calloc((size_t)count, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	r = cluster_msg_unpack(natsMsg_GetData(m), dl, (size_t)count, ev);
	if (r < 0) {
		free(ev);
		return r;
	}
	*ret = ev;
	*ret_n = (size_t)count;
	return 0;
}
