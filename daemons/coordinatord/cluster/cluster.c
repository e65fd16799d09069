/* SPDX-License-Identifier: MIT */
/*
 * cluster.c — lifecycle: connect (bounded), the libevent adapter, the worker
 * thread and the two job queues, readiness. See cluster.h.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The adapter defines its functions in the header: included here only. Its
 * Read/Write are used as they are; Attach and Detach are ours (below). */
#include <nats/adapters/libevent.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"
#include "time-util.h"

/* ---- the libevent adapter's attach and detach, without its deadlock ----
 *
 * libnats 3.4's natsLibevent_Attach(), called on a reconnection from
 * libnats' reconnect thread with the connection's lock held, frees the old
 * socket's events with event_free(), which waits until a callback of theirs
 * that is running on the loop thread returns; that callback
 * (natsConnection_ProcessReadEvent) waits for the same connection lock: both
 * threads wait for ever (seen in test-cluster's server kill). Here the old
 * events are released with event_free_finalize(), which does not wait: the
 * loop frees them once no callback of theirs runs. Detach does the same and
 * frees the adapter's state with the last of its events. */
typedef struct EvAttach {
	natsLibeventEvents e; /* first: natsLibevent_Read/Write take it as theirs */
	int pending;	      /* Detach: its events not finalized yet, +1 (atomic) */
} EvAttach;

static void
ev_finalized(struct event *ev, void *arg)
{
}

static void
ev_finalized_last(struct event *ev, void *arg)
{
	EvAttach *a = arg;

	if (__atomic_sub_fetch(&a->pending, 1, __ATOMIC_ACQ_REL) == 0)
		free(a);
}

static void
ev_release(struct event **ev)
{
	if (*ev) {
		(void)event_free_finalize(0, *ev, ev_finalized);
		*ev = NULL;
	}
}

static natsStatus
ev_attach(void **userdata, void *loop, natsConnection *nc, natsSock sock)
{
	EvAttach *a = *userdata;
	struct timeval forever = {.tv_sec = 100000};

	if (!a) {
		a = calloc(1, sizeof(*a));
		if (!a)
			return NATS_NO_MEMORY;
		a->e.nc = nc;
		a->e.loop = loop;
		/* keeps the loop running while the socket has no event added */
		a->e.keepActive = event_new(a->e.loop, -1, EV_PERSIST, keepAliveCb, a);
		if (!a->e.keepActive || event_add(a->e.keepActive, &forever) != 0) {
			if (a->e.keepActive)
				event_free(a->e.keepActive);
			free(a);
			return NATS_ERR;
		}
	} else {
		ev_release(&a->e.read);
		ev_release(&a->e.write);
	}
	a->e.read = event_new(a->e.loop, sock, EV_READ | EV_PERSIST, natsLibevent_ProcessEvent, a);
	a->e.write =
	    event_new(a->e.loop, sock, EV_WRITE | EV_PERSIST, natsLibevent_ProcessEvent, a);
	if (!a->e.read || !a->e.write || natsLibevent_Read(a, true) != NATS_OK) {
		ev_release(&a->e.read);
		ev_release(&a->e.write);
		*userdata = a; /* libnats detaches it */
		return NATS_ERR;
	}
	*userdata = a;
	return NATS_OK;
}

static natsStatus
ev_detach(void *userdata)
{
	EvAttach *a = userdata;
	struct event **evs[] = {&a->e.read, &a->e.write, &a->e.keepActive};

	/* held (+1) while the events are handed over: a finalizer that runs on
	 * the loop meanwhile does not free it under us */
	__atomic_store_n(&a->pending, 1, __ATOMIC_RELEASE);
	for (size_t i = 0; i < ELEMENTSOF(evs); i++)
		if (*evs[i]) {
			__atomic_add_fetch(&a->pending, 1, __ATOMIC_ACQ_REL);
			(void)event_free_finalize(0, *evs[i], ev_finalized_last);
			*evs[i] = NULL;
		}
	if (__atomic_sub_fetch(&a->pending, 1, __ATOMIC_ACQ_REL) == 0)
		free(a);
	return NATS_OK;
}

int
cluster_global_init(void)
{
	natsLibevent_Init(); /* evthread_use_pthreads() */
	natsStatus s = nats_Open(-1);
	if (s != NATS_OK)
		return log_error_errno(SYNTHETIC_ERRNO(EIO), "nats_Open: %s",
				       natsStatus_GetText(s));
	return 0;
}

bool
cluster_valid_token(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
			return false;
	}
	return true;
}

int
cluster_errno(natsStatus s, jsErrCode code, const char *what)
{
	switch (s) {
	case NATS_OK: return 0;
	case NATS_TIMEOUT: return -ETIMEDOUT;
	case NATS_NOT_FOUND: return -ENOENT;
	case NATS_CONNECTION_CLOSED:
	case NATS_CONNECTION_DISCONNECTED:
	case NATS_NO_SERVER:
	case NATS_NO_RESPONDERS: return -ENOTCONN;
	case NATS_NOT_PERMITTED: return -EACCES;
	case NATS_NO_MEMORY: return -ENOMEM;
	default: break;
	}
	if (code == JSStreamWrongLastSequenceErr)
		return -ESTALE;
	/* the text of the thread's last error: NATS's own, no credentials in it */
	natsStatus last = NATS_OK;
	const char *text = nats_GetLastError(&last);
	log_warning("cluster: %s: %s (%s, JetStream error %d)", what, text ? text : "-",
		    natsStatus_GetText(s), (int)code);
	return -EIO;
}

/* ---- queues ---- */

void
mailbox_post(Mailbox *mb, Job *j)
{
	uint64_t one = 1;
	j->next = NULL;
	pthread_mutex_lock(&mb->lock);
	if (mb->closed) {
		pthread_mutex_unlock(&mb->lock);
		free(j); /* jobs posted from libnats threads are single blocks */
		return;
	}
	*mb->tail = j;
	mb->tail = &j->next;
	/* an eventfd write cannot block short of 2^64-1 pending */
	(void)!write(mb->efd, &one, sizeof(one));
	pthread_mutex_unlock(&mb->lock);
}

void
cluster_post(Cluster *c, Job *j)
{
	mailbox_post(c->mb, j);
}

static int
mailbox_new(Mailbox **ret)
{
	Mailbox *mb = calloc(1, sizeof(*mb));
	if (!mb)
		return -ENOMEM;
	pthread_mutex_init(&mb->lock, NULL);
	mb->tail = &mb->head;
	mb->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (mb->efd < 0) {
		int r = -errno;
		free(mb);
		return r;
	}
	*ret = mb;
	return 0;
}

static Job *
mailbox_take(Mailbox *mb, bool close_it)
{
	pthread_mutex_lock(&mb->lock);
	Job *j = mb->head;
	mb->head = NULL;
	mb->tail = &mb->head;
	mb->closed = mb->closed || close_it;
	pthread_mutex_unlock(&mb->lock);
	return j;
}

/* Closed mailboxes, reachable for the process's life (see Mailbox). */
static Mailbox *dead_mailboxes;
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;

static void
mailbox_bury(Mailbox *mb)
{
	close(mb->efd);
	mb->efd = -1;
	pthread_mutex_lock(&dead_lock);
	mb->next_dead = dead_mailboxes;
	dead_mailboxes = mb;
	pthread_mutex_unlock(&dead_lock);
}

static void
lane_submit(struct Lane *l, Job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&l->c->lock);
	*l->tail = j;
	l->tail = &j->next;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->c->lock);
}

void
cluster_submit(Cluster *c, Job *j)
{
	lane_submit(&c->lanes[0], j);
}

void
cluster_submit_read(Cluster *c, Job *j)
{
	lane_submit(&c->lanes[1], j);
}

static void
on_done(evutil_socket_t fd, short what, void *arg)
{
	Cluster *c = arg;
	uint64_t v;
	(void)!read(c->mb->efd, &v, sizeof(v));
	Job *j = mailbox_take(c->mb, false);
	while (j) {
		Job *next = j->next;
		j->done(c, j);
		j = next;
	}
}

static void *
lane_main(void *arg)
{
	struct Lane *l = arg;
	Cluster *c = l->c;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!l->head && !c->stop)
			pthread_cond_wait(&l->cond, &c->lock);
		if (c->stop)
			break;
		Job *j = l->head;
		l->head = j->next;
		if (!l->head)
			l->tail = &l->head;
		pthread_mutex_unlock(&c->lock);
		j->exec(c, j);
		cluster_post(c, j);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- readiness ---- */

typedef struct StateJob {
	Job job;
	ClusterState state;
} StateJob;

static void
state_done(Cluster *c, Job *j)
{
	StateJob *sj = (StateJob *)j;
	if (!c->closing && c->cbs.on_state)
		c->cbs.on_state(c, sj->state, c->userdata);
	free(sj);
}

void
cluster_set_state(Cluster *c, ClusterState s)
{
	if (atomic_exchange(&c->state, (int)s) == (int)s)
		return;
	StateJob *sj = calloc(1, sizeof(*sj));
	if (!sj)
		return; /* cluster_state() still tells */
	sj->job.done = state_done;
	sj->state = s;
	cluster_post(c, &sj->job);
}

ClusterState
cluster_state(Cluster *c)
{
	return (ClusterState)atomic_load(&c->state);
}

bool
cluster_ready(Cluster *c)
{
	return c && cluster_state(c) == CLUSTER_READY;
}

const char *
cluster_node(Cluster *c)
{
	return c->node;
}

const char *
cluster_writer(Cluster *c)
{
	return c->writer;
}

const char *
cluster_connected_url(Cluster *c, char *buf, size_t len)
{
	if (!c->nc || natsConnection_GetConnectedUrl(c->nc, buf, len) != NATS_OK)
		buf[0] = 0;
	return buf;
}

/* libnats threads */
static void
on_disconnected(natsConnection *nc, void *closure)
{
	Cluster *c = closure;
	if (cluster_state(c) != CLUSTER_FAILED)
		cluster_set_state(c, CLUSTER_DISCONNECTED);
}

/* The last callback libnats makes for a connection (its callbacks run in
 * order on one thread): cluster_free() waits for it before freeing c. */
static void
on_closed(natsConnection *nc, void *closure)
{
	Cluster *c = closure;
	pthread_mutex_lock(&c->lock);
	c->nc_closed = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void
reconnected_done(Cluster *c, Job *j)
{
	free(j);
	if (!c->closing)
		cluster_publish_reconnected(c);
}

static void
on_reconnected(natsConnection *nc, void *closure)
{
	Cluster *c = closure;
	Job *j = calloc(1, sizeof(*j));
	if (j) {
		j->done = reconnected_done;
		cluster_post(c, j);
	}
	/* the stream and buckets were ensured before: they outlive a connection */
	if (cluster_state(c) == CLUSTER_DISCONNECTED)
		cluster_set_state(c, c->kv_runs ? CLUSTER_READY : CLUSTER_CONNECTING);
}

/* ---- the first job: stream and buckets ---- */

typedef struct EnsureJob {
	Job job;
	int r;
} EnsureJob;

/* A NATS cluster that is starting too has no JetStream meta leader for a
 * while: retry for as long as a connection may take, and past that for as
 * long as the answer is none or "temporarily unavailable" (a timeout, no
 * responders, no meta leader: JetStream without quorum), logged every 30 s — the node stays not
 * ready, and is ready once a majority of servers is back (issue 35 H: a node started then used to
 * stay failed). An error JetStream answers (a bad configuration) fails. */
static void
ensure_exec(Cluster *c, Job *j)
{
	usec_t deadline = now_usec() + (usec_t)c->connect_wait_ms * USEC_PER_MSEC;
	usec_t next_log = deadline;
	int r = cluster_check_server_version(c);
	if (r < 0) {
		((EnsureJob *)j)->r = r;
		return;
	}
	while ((r = cluster_ensure(c)) < 0 && r != -EACCES && !c->stop &&
	       (now_usec() < deadline || r == -ETIMEDOUT || r == -ENOTCONN || r == -EAGAIN)) {
		if (now_usec() >= next_log) {
			log_warning_errno(r,
					  "cluster: stream %s and its buckets not ensured yet "
					  "(%m); JetStream has no quorum? retrying",
					  CLUSTER_STREAM);
			next_log = now_usec() + 30 * USEC_PER_SEC;
		}
		struct timespec ts = {0, 500 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	((EnsureJob *)j)->r = r;
}

static void
ensure_done(Cluster *c, Job *j)
{
	int r = ((EnsureJob *)j)->r;
	free(j);
	if (c->closing)
		return;
	if (r < 0) {
		log_error_errno(r, "cluster: cannot ensure stream %s and its buckets: %m",
				CLUSTER_STREAM);
		cluster_set_state(c, CLUSTER_FAILED);
		return;
	}
	r = cluster_nodes_start(c);
	if (r < 0) {
		cluster_set_state(c, CLUSTER_FAILED);
		return;
	}
	if (cluster_state(c) == CLUSTER_CONNECTING)
		cluster_set_state(c, CLUSTER_READY);
}

/* ---- connect ---- */

static bool
set(const char *s)
{
	return s && *s;
}

/* The client ping interval (ClusterOptions.ping_interval_ms). */
static int64_t
ping_interval_ms(const ClusterOptions *o)
{
	int out = o->max_pings_out > 0 ? o->max_pings_out : 2;
	if (o->ping_interval_ms > 0)
		return o->ping_interval_ms;
	int64_t ttl = o->node_ttl_ms > 0 ? o->node_ttl_ms : 10000;
	/* at least 2 s: the main connection reads its PONGs on the event
	 * loop, which a busy moment may hold for a while, and servers that
	 * come back from a pause answer late (at 1 s, t_cluster_retain's
	 * paused servers had the restarted node's connections dropped and
	 * made again while JetStream elected its leaders) */
	return MAX(ttl / (2 * (out + 1)), (int64_t)2000);
}

/* What both connections share: the servers, reconnection, pings,
 * credentials and TLS. */
static natsStatus
options_common(natsOptions **ret, const ClusterOptions *o, const char *name)
{
	natsStatus s;
	size_t n = 0;
	while (o->servers[n])
		n++;
	s = natsOptions_Create(ret);
	if (s == NATS_OK)
		s = natsOptions_SetServers(*ret, (const char **)o->servers, (int)n);
	if (s == NATS_OK)
		s = natsOptions_SetName(*ret, name);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(*ret, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(*ret, CLUSTER_RECONNECT_WAIT_MS);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(*ret, 2000);
	/* a silent server (cut off, stopped) keeps the socket open: without
	 * pings of its own, libnats would notice after its 2-minute default;
	 * a stale connection reconnects to the next server of the list first */
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(*ret, ping_interval_ms(o));
	if (s == NATS_OK)
		s = natsOptions_SetMaxPingsOut(*ret, o->max_pings_out > 0 ? o->max_pings_out : 2);
	if (s == NATS_OK && set(o->creds))
		s = natsOptions_SetUserCredentialsFromFiles(*ret, o->creds, NULL);
	if (s == NATS_OK && (set(o->tls_ca) || set(o->tls_cert)))
		s = natsOptions_SetSecure(*ret, true);
	if (s == NATS_OK && set(o->tls_ca))
		s = natsOptions_LoadCATrustedCertificates(*ret, o->tls_ca);
	if (s == NATS_OK && set(o->tls_cert))
		s = natsOptions_LoadCertificatesChain(*ret, o->tls_cert, o->tls_key);
	return s;
}

/* The main connection's options (on the loop), and the heartbeat's (no
 * event loop: cluster-beat.c) when this node beats. */
static int
options_new(Cluster *c, const ClusterOptions *o)
{
	char beat_name[CLUSTER_NODE_MAX + 16];
	natsStatus s = options_common(&c->nopts, o, c->node);

	if (s == NATS_OK)
		s = natsOptions_SetDisconnectedCB(c->nopts, on_disconnected, c);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(c->nopts, on_reconnected, c);
	if (s == NATS_OK)
		s = natsOptions_SetClosedCB(c->nopts, on_closed, c);
	if (s == NATS_OK)
		s = natsOptions_SetEventLoop(c->nopts, c->base, ev_attach, natsLibevent_Read,
					     natsLibevent_Write, ev_detach);
	/* a publish arms the loop's write event at once instead of waking
	 * libnats' flusher thread to do it: one thread hand-off less per
	 * request, reply and event (what one loop turn writes still leaves in
	 * one write: the write itself is the loop's) */
	if (s == NATS_OK)
		s = natsOptions_SetSendAsap(c->nopts, true);
	snprintf(beat_name, sizeof(beat_name), "%s.heartbeat", c->node);
	if (s == NATS_OK && c->heartbeat_ms > 0)
		s = options_common(&c->beat_nopts, o, beat_name);
	if (s != NATS_OK)
		/* file names only: libnats' text names the file, never its content */
		return log_error_errno(
		    SYNTHETIC_ERRNO(EINVAL),
		    "cluster: NATS options (creds '%s', tls_ca '%s', tls_cert "
		    "'%s'): %s",
		    set(o->creds) ? o->creds : "", set(o->tls_ca) ? o->tls_ca : "",
		    set(o->tls_cert) ? o->tls_cert : "", nats_GetLastError(NULL));
	return 0;
}

/* Blocking, at most wait_ms: the servers in turn, again until the time is up. */
static int
connect_bounded(Cluster *c, int64_t wait_ms)
{
	usec_t deadline = now_usec() + (usec_t)wait_ms * USEC_PER_MSEC;
	natsStatus s;
	for (;;) {
		s = natsConnection_Connect(&c->nc, c->nopts);
		if (s == NATS_OK)
			return 0;
		if (s == NATS_NOT_PERMITTED || s == NATS_SSL_ERROR)
			break; /* refused credentials or TLS: retrying will not help */
		if (now_usec() + 250 * USEC_PER_MSEC >= deadline)
			break;
		struct timespec ts = {0, 250 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	int r = s == NATS_NOT_PERMITTED ? -EACCES : s == NATS_SSL_ERROR ? -EPROTO : -ETIMEDOUT;
	return log_error_errno(r, "cluster: cannot connect to NATS within %lld ms: %s",
			       (long long)wait_ms, natsStatus_GetText(s));
}

static int
start_threads(Cluster *c)
{
	c->ev_done = event_new(c->base, c->mb->efd, EV_READ | EV_PERSIST, on_done, c);
	if (!c->ev_done || event_add(c->ev_done, NULL) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++) {
		int r = -pthread_create(&c->lanes[i].thread, NULL, lane_main, &c->lanes[i]);
		if (r < 0)
			return r;
		c->lanes[i].started = true;
	}
	return 0;
}

int
cluster_new(struct event_base *base, const ClusterOptions *o, const ClusterCallbacks *cbs,
	    void *userdata, Cluster **ret)
{
	if (!o->servers || !o->servers[0] || !cluster_valid_token(o->node, CLUSTER_NODE_MAX - 1) ||
	    o->replicas < 1 || o->replicas > 5)
		return -EINVAL;
	Cluster *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base = base;
	snprintf(c->node, sizeof(c->node), "%s", o->node);
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = now_usec() ^ (uint64_t)getpid();
	snprintf(c->writer, sizeof(c->writer), "%s-%016" PRIx64, c->node, rnd);
	c->replicas = o->replicas;
	c->heartbeat_ms = o->heartbeat_ms;
	c->node_ttl_ms = o->node_ttl_ms > 0 ? o->node_ttl_ms : 10000;
	c->op_timeout_ms = o->op_timeout_ms > 0 ? o->op_timeout_ms : CLUSTER_OP_TIMEOUT_MS;
	c->connect_wait_ms = o->connect_wait_ms > 0 ? o->connect_wait_ms : CLUSTER_CONNECT_WAIT_MS;
	c->watch_nodes = o->watch_nodes;
	c->run_max_age_ms = o->set_max_age ? MAX(o->max_age_ms, (int64_t)0) : -1;
	if (cbs)
		c->cbs = *cbs;
	c->userdata = userdata;
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++) {
		c->lanes[i].c = c;
		c->lanes[i].tail = &c->lanes[i].head;
		pthread_cond_init(&c->lanes[i].cond, NULL);
	}
	atomic_init(&c->state, CLUSTER_CONNECTING);
	atomic_init(&c->watch_stop, false);
	atomic_init(&c->loop_seen, now_usec());
	c->loop_stall_ms = o->loop_stall_max_ms > 0 ? o->loop_stall_max_ms : 3 * c->node_ttl_ms;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_mutex_init(&c->beat_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* now_usec()'s */
	pthread_cond_init(&c->beat_cond, &ca);
	pthread_condattr_destroy(&ca);

	int r = mailbox_new(&c->mb);
	if (r < 0) {
		free(c);
		return r;
	}
	r = options_new(c, o);
	if (r >= 0)
		r = connect_bounded(c, c->connect_wait_ms);
	if (r >= 0) {
		jsOptions jo;
		jsOptions_Init(&jo);
		jo.Wait = c->op_timeout_ms;
		r = cluster_publish_setup(c, &jo);
		if (r >= 0 && natsConnection_JetStream(&c->js, c->nc, &jo) != NATS_OK)
			r = -ENOMEM;
	}
	if (r >= 0)
		r = start_threads(c);
	if (r < 0) {
		cluster_free(c);
		return r;
	}
	EnsureJob *ej = calloc(1, sizeof(*ej));
	if (!ej) {
		cluster_free(c);
		return -ENOMEM;
	}
	ej->job.exec = ensure_exec;
	ej->job.done = ensure_done;
	cluster_submit(c, &ej->job);
	char url[256];
	log_info("cluster: node %s connected to NATS at %s, replicas %d", c->node,
		 cluster_connected_url(c, url, sizeof(url)), c->replicas);
	*ret = c;
	return 0;
}

static void
free_jobs(Cluster *c, Job *j)
{
	while (j) {
		Job *next = j->next;
		j->done(c, j); /* c->closing: frees only */
		j = next;
	}
}

Cluster *
cluster_free(Cluster *c)
{
	if (!c)
		return NULL;
	c->closing = true;
	cluster_nodes_stop(c);
	cluster_beat_stop(c);
	/* closing the connection fails the worker's blocking call at once */
	pthread_mutex_lock(&c->lock);
	if (c->nc) {
		pthread_mutex_unlock(&c->lock);
		natsConnection_Close(c->nc);
		pthread_mutex_lock(&c->lock);
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		while (!c->nc_closed)
			if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT)
				break;
	}
	c->stop = true;
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++)
		pthread_cond_signal(&c->lanes[i].cond);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++)
		if (c->lanes[i].started)
			pthread_join(c->lanes[i].thread, NULL);
	if (c->watcher_started)
		pthread_join(c->watcher, NULL);
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++) {
		free_jobs(c, c->lanes[i].head);
		c->lanes[i].head = NULL;
	}
	free_jobs(c, mailbox_take(c->mb, true)); /* and later posts are dropped */
	cluster_publish_free_all(c);
	cluster_watch_free_all(c);
	cluster_rpc_free_all(c);
	kvStore_Destroy(c->kv_threads);
	kvStore_Destroy(c->kv_nodes);
	kvStore_Destroy(c->kv_runs);
	kvStore_Destroy(c->kv_inputs);
	kvStore_Destroy(c->kv_idem);
	jsCtx_Destroy(c->js);
	natsConnection_Destroy(c->nc);
	natsOptions_Destroy(c->nopts);
	if (c->ev_done)
		event_free(c->ev_done);
	mailbox_bury(c->mb);
	pthread_cond_destroy(&c->cond);
	for (size_t i = 0; i < ELEMENTSOF(c->lanes); i++)
		pthread_cond_destroy(&c->lanes[i].cond);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->beat_cond);
	pthread_mutex_destroy(&c->beat_lock);
	free(c);
	return NULL;
}

ClusterOptions
cluster_conf_options(const ClusterConf *c, char *const *urls, const char *node)
{
	return (ClusterOptions){
	    .servers = (const char *const *)urls,
	    .node = node,
	    .replicas = (int)c->replicas,
	    .creds = c->creds,
	    .tls_ca = c->tls_ca,
	    .tls_cert = c->tls_cert,
	    .tls_key = c->tls_key,
	    .heartbeat_ms = c->heartbeat_ms,
	    .node_ttl_ms = c->node_ttl_ms,
	    .loop_stall_max_ms = c->loop_stall_max_ms,
	    .ping_interval_ms = c->ping_interval_ms,
	    .max_pings_out = (int)c->max_pings_out,
	};
}
