/* SPDX-License-Identifier: MIT */
/*
 * cluster-beat.c — this node's heartbeats (rw_nodes/<node>) and its lease,
 * independent of the event loop (docs/CLUSTER.md "Heartbeats").
 *
 * The main connection does its socket I/O on the loop (libnats' libevent
 * adapter), and its KV calls wait in the worker lanes behind slow JetStream
 * calls: a loop held by a request, or a lane behind a slow listing, would
 * delay the heartbeat past node_ttl_ms, and other nodes would take this
 * node's threads and fail its runs node_lost. So the heartbeat has a thread
 * of its own with a connection of its own (no event loop: libnats' own
 * threads read it), a timer of its own (every heartbeat_ms), and a
 * kvStore_Put of rw_nodes per beat. The lease (cluster_lease()) is kept
 * from its acknowledgements, under beat_lock.
 *
 * A loop that is truly hung must still lose the node: the loop ticks
 * (cluster_beat_loop_tick(), from its liveness timer, every heartbeat_ms),
 * and with no tick for loop_stall_ms (default 3 × node_ttl_ms) this thread
 * stops beating, logged; the key then expires after node_ttl_ms and the
 * node is lost, as a crashed one. A tick again and the beats resume.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

static usec_t
lease_span(Cluster *c)
{
	return (usec_t)c->node_ttl_ms * USEC_PER_MSEC / 2;
}

uint64_t
cluster_lease(Cluster *c)
{
	uint64_t g;

	pthread_mutex_lock(&c->beat_lock);
	g = c->lease_gen == 0 || now_usec() - c->beat_ok_sent > lease_span(c) ? 0 : c->lease_gen;
	pthread_mutex_unlock(&c->beat_lock);
	return g;
}

int
cluster_set_node_info(Cluster *c, const char *info)
{
	if (info && strlen(info) > CLUSTER_NODE_INFO_MAX)
		return -E2BIG;
	char *copy = info ? strdup(info) : NULL;
	if (info && !copy)
		return -ENOMEM;
	pthread_mutex_lock(&c->beat_lock);
	free(c->node_info);
	c->node_info = copy;
	pthread_mutex_unlock(&c->beat_lock);
	return 0;
}

void
cluster_beat_loop_tick(Cluster *c)
{
	atomic_store(&c->loop_seen, now_usec());
}

/* The beat's connection, its JetStream context and rw_nodes (beater
 * thread; connected on first use, kept: libnats reconnects it). */
static int
beat_connect(Cluster *c, jsCtx **js, kvStore **kv)
{
	natsConnection *nc = NULL;
	natsStatus s;

	if (*kv)
		return 0;
	pthread_mutex_lock(&c->beat_lock);
	nc = c->beat_nc;
	pthread_mutex_unlock(&c->beat_lock);
	if (!nc) {
		s = natsConnection_Connect(&nc, c->beat_nopts);
		if (s != NATS_OK)
			return cluster_errno(s, 0, "heartbeat connection");
		pthread_mutex_lock(&c->beat_lock);
		c->beat_nc = nc; /* cluster_beat_stop() closes it */
		bool stop = c->beat_stop;
		pthread_mutex_unlock(&c->beat_lock);
		if (stop)
			return -ECANCELED;
	}
	if (!*js) {
		jsOptions jo;
		jsOptions_Init(&jo);
		jo.Wait = c->op_timeout_ms;
		s = natsConnection_JetStream(js, nc, &jo);
		if (s != NATS_OK)
			return cluster_errno(s, 0, "heartbeat JetStream context");
	}
	s = js_KeyValue(kv, *js, CLUSTER_BUCKET_NODES);
	return s == NATS_OK ? 0 : cluster_errno(s, 0, "heartbeat bucket " CLUSTER_BUCKET_NODES);
}

/* One beat (beater thread, beat_lock not held): 0 when acknowledged. */
static int
beat_once(Cluster *c, jsCtx **js, kvStore **kv, const char *v)
{
	uint64_t rev;
	int r = beat_connect(c, js, kv);

	if (r < 0)
		return r;
	return cluster_errno(kvStore_Put(&rev, *kv, c->node, v, (int)strlen(v)), 0, "heartbeat");
}

/* Log a streak's start and end, once each (a bucket leader election lasts
 * seconds). */
static void
beat_logged(Cluster *c, int r, unsigned *failures)
{
	if (r < 0 && (*failures)++ == 0)
		log_warning_errno(r, "cluster: heartbeat of %s failed: %m", c->node);
	else if (r >= 0 && *failures > 0) {
		log_notice("cluster: heartbeat of %s back after %u failures", c->node, *failures);
		*failures = 0;
	}
}

static void *
beater_main(void *arg)
{
	Cluster *c = arg;
	jsCtx *js = NULL;
	kvStore *kv = NULL;
	unsigned failures = 0;
	bool stalled = false;
	usec_t stall = (usec_t)c->loop_stall_ms * USEC_PER_MSEC;

	pthread_mutex_lock(&c->beat_lock);
	while (!c->beat_stop) {
		usec_t start = now_usec(), seen = atomic_load(&c->loop_seen);
		bool hung = start > seen && start - seen > stall;
		if (hung != stalled) {
			stalled = hung;
			if (hung)
				log_error("cluster: the event loop made no progress for %lld ms: "
					  "this node stops its heartbeats (other nodes will take "
					  "its threads after node_ttl_ms)",
					  (long long)((start - seen) / USEC_PER_MSEC));
			else
				log_notice("cluster: the event loop runs again: heartbeats resume");
		}
		if (!hung) {
			char *v = strdup(c->node_info ? c->node_info : "{}");
			pthread_mutex_unlock(&c->beat_lock);
			int r = v ? beat_once(c, &js, &kv, v) : -ENOMEM;
			free(v);
			if (r != -ECANCELED)
				beat_logged(c, r, &failures);
			pthread_mutex_lock(&c->beat_lock);
			if (r >= 0) {
				/* beats further apart than half the TTL: the key may
				 * have expired in between (cluster_lease()) */
				if (c->lease_gen == 0 || start - c->beat_ok_sent > lease_span(c))
					c->lease_gen++;
				c->beat_ok_sent = start;
			}
		}
		usec_t next = start + (usec_t)c->heartbeat_ms * USEC_PER_MSEC;
		struct timespec until = {(time_t)(next / USEC_PER_SEC),
					 (long)(next % USEC_PER_SEC) * 1000};
		while (!c->beat_stop && now_usec() < next)
			pthread_cond_timedwait(&c->beat_cond, &c->beat_lock, &until);
	}
	pthread_mutex_unlock(&c->beat_lock);
	kvStore_Destroy(kv);
	jsCtx_Destroy(js);
	return NULL;
}

int
cluster_beat_start(Cluster *c)
{
	if (c->heartbeat_ms <= 0 || !c->beat_nopts)
		return 0;
	cluster_beat_loop_tick(c);
	int r = -pthread_create(&c->beater, NULL, beater_main, c);
	if (r < 0)
		return log_error_errno(r, "cluster: heartbeat thread: %m");
	c->beater_started = true;
	return 0;
}

void
cluster_beat_stop(Cluster *c)
{
	pthread_mutex_lock(&c->beat_lock);
	c->beat_stop = true;
	natsConnection *nc = c->beat_nc;
	pthread_cond_signal(&c->beat_cond);
	pthread_mutex_unlock(&c->beat_lock);
	if (nc) /* fails a beat in flight at once */
		natsConnection_Close(nc);
	if (c->beater_started)
		pthread_join(c->beater, NULL);
	c->beater_started = false;
	natsConnection_Destroy(c->beat_nc);
	c->beat_nc = NULL;
	natsOptions_Destroy(c->beat_nopts);
	c->beat_nopts = NULL;
	free(c->node_info);
	c->node_info = NULL;
}
