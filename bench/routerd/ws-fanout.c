/* SPDX-License-Identifier: MIT */
/*
 * ws-fanout — the load client of BENCH-RELIABILITY B4 (WebSocket tail
 * fan-out), the same program for routerd and for the reference
 * (libwebsockets-test-server, lws-mirror-protocol).
 *
 * K receiver WebSocket connections and one producer, all in one epoll loop
 * (run it pinned to one CPU). The producer sends RATE messages per second,
 * paced by a timerfd; each message is a ~200-byte JSON chunk carrying its
 * send time ("t", CLOCK_MONOTONIC ns). A receiver computes now − t.
 *
 *   ws-fanout rw  PORT K RATE WARM MEAS SERVER_PID COORD_SOCK RUN_ID THREAD
 *       producer: RUN_APPEND of the direct run-log API on coordinatord's
 *       Unix socket (msgpack frames written by hand, replies discarded);
 *       receivers: K tails GET /runs/RUN_ID/stream?threadId=THREAD on routerd
 *   ws-fanout lws PORT K RATE WARM MEAS SERVER_PID
 *       producer: one more WebSocket client of lws-mirror-protocol sending
 *       the chunk as a text message (the mirror broadcasts it to every
 *       client of the protocol, the sender included; its echo is read and
 *       discarded); receivers: K clients of lws-mirror-protocol
 *
 * Counts only during the MEAS seconds after WARM: messages delivered to the
 * K receivers, the server's CPU (utime+stime of /proc/SERVER_PID/stat) and
 * this client's CPU (getrusage). Prints one JSON object.
 *
 * The WebSocket framing is a minimal hand-written client (RFC 6455: masked
 * client frames, unmasked server frames, 7/16/64-bit lengths; pings
 * answered, fragmented messages not expected from either server).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MSG_HELLO 1
#define MSG_RUN_APPEND 51
#define CHUNK_BYTES 200

enum { R_RECV, R_WS_SENDER, R_IPC };

typedef struct Conn {
	int fd, role;
	unsigned char *buf;
	size_t len, cap;
} Conn;

static int port;
static long delivered, nondata, continuations, closes, sent_meas;
static int measuring;
/* latency histogram: 10 µs buckets up to 10 s, then one overflow bucket */
#define HBUCKET_NS 10000
#define HBUCKETS 1000000
static uint32_t *hist;
static uint64_t lat_max, lat_n;
static void hist_add(uint32_t *h, uint64_t lat);

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

static double
proc_cpu(int pid)
{
	char path[64], b[2048];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path);
	ssize_t n = read(fd, b, sizeof(b) - 1);
	close(fd);
	if (n <= 0)
		die("read stat");
	b[n] = 0;
	char *p = strrchr(b, ')'); /* comm may hold spaces */
	unsigned long ut = 0, st = 0;
	/* after ")": state(3) ... utime is field 14, stime 15 */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		die("parse stat");
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double
self_cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			/* the producer is one small message at a time; a full socket
			 * buffer means the server stopped reading: wait for it */
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (w <= 0)
			die("write");
		c += w;
		n -= (size_t)w;
	}
}

static void
ws_send(int fd, int opcode, const char *payload, size_t n)
{
	unsigned char f[14 + 4096];
	size_t h = 0;
	if (n > 4096)
		abort();
	f[h++] = (unsigned char)(0x80 | opcode);
	if (n < 126) {
		f[h++] = (unsigned char)(0x80 | n);
	} else {
		f[h++] = 0x80 | 126;
		f[h++] = (unsigned char)(n >> 8);
		f[h++] = (unsigned char)n;
	}
	uint32_t mask = (uint32_t)random();
	unsigned char m[4];
	memcpy(m, &mask, 4);
	memcpy(f + h, m, 4);
	h += 4;
	for (size_t i = 0; i < n; i++)
		f[h + i] = (unsigned char)payload[i] ^ m[i & 3];
	write_all(fd, f, h + n);
}

static int
tcp_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Blocking handshake; bytes after the 101 head stay in c->buf. */
static void
ws_handshake(Conn *c, const char *path, const char *extra)
{
	char req[1024];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
			 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n",
			 path, port, extra);
	c->fd = tcp_connect();
	write_all(c->fd, req, (size_t)n);
	for (;;) {
		if (c->cap - c->len < 1024) {
			c->cap = c->cap ? c->cap * 2 : 8192;
			c->buf = realloc(c->buf, c->cap);
		}
		ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
		if (r <= 0)
			die("handshake read");
		c->len += (size_t)r;
		c->buf[c->len] = 0;
		char *e = strstr((char *)c->buf, "\r\n\r\n");
		if (!e)
			continue;
		if (strncmp((char *)c->buf, "HTTP/1.1 101", 12) != 0) {
			fprintf(stderr, "ws-fanout: handshake refused: %.200s\n", c->buf);
			exit(1);
		}
		size_t head = (size_t)(e + 4 - (char *)c->buf);
		memmove(c->buf, c->buf + head, c->len - head);
		c->len -= head;
		return;
	}
}

static void
on_message(Conn *c, const unsigned char *p, size_t n, uint64_t now)
{
	if (c->role != R_RECV)
		return;
	/* "t": is the send time; other frames (status, records) have none */
	const unsigned char *t = memmem(p, n, "\"t\":", 4);
	if (!t) {
		nondata++;
		return;
	}
	if (!measuring)
		return;
	uint64_t sent = strtoull((const char *)t + 4, NULL, 10);
	uint64_t lat = now > sent ? now - sent : 0;
	delivered++;
	lat_n++;
	if (lat > lat_max)
		lat_max = lat;
	hist_add(hist, lat);
}

/* Parse as many whole server frames as are buffered. */
static void
ws_consume(Conn *c, uint64_t now)
{
	size_t off = 0;
	while (c->len - off >= 2) {
		unsigned char *f = c->buf + off;
		int op = f[0] & 0x0f;
		uint64_t n = f[1] & 0x7f;
		size_t h = 2;
		if (n == 126) {
			if (c->len - off < 4)
				break;
			n = ((uint64_t)f[2] << 8) | f[3];
			h = 4;
		} else if (n == 127) {
			if (c->len - off < 10)
				break;
			n = 0;
			for (int i = 0; i < 8; i++)
				n = (n << 8) | f[2 + i];
			h = 10;
		}
		if (f[1] & 0x80) {
			fprintf(stderr, "ws-fanout: masked server frame\n");
			exit(1);
		}
		if (c->len - off < h + n)
			break;
		if (op == 1 || op == 2)
			on_message(c, f + h, (size_t)n, now);
		else if (op == 0)
			continuations++; /* a message counts once, at its first frame */
		else if (op == 9)
			ws_send(c->fd, 10, (const char *)f + h, (size_t)n);
		else if (op == 8)
			closes++;
		off += h + (size_t)n;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

/* --- msgpack, just what HELLO and RUN_APPEND need --- */
typedef struct {
	unsigned char b[1024];
	size_t n;
} Mp;

static void
mp_byte(Mp *m, unsigned v)
{
	m->b[m->n++] = (unsigned char)v;
}

static void
mp_str(Mp *m, const char *s)
{
	size_t l = strlen(s);
	if (l < 32) {
		mp_byte(m, 0xa0 | (unsigned)l);
	} else if (l < 256) {
		mp_byte(m, 0xd9);
		mp_byte(m, (unsigned)l);
	} else {
		mp_byte(m, 0xda);
		mp_byte(m, (unsigned)(l >> 8));
		mp_byte(m, (unsigned)l & 0xff);
	}
	memcpy(m->b + m->n, s, l);
	m->n += l;
}

static void
mp_u32(Mp *m, uint32_t v)
{
	mp_byte(m, 0xce);
	for (int i = 3; i >= 0; i--)
		mp_byte(m, (v >> (8 * i)) & 0xff);
}

static uint32_t ipc_req;
/* RUN_APPEND ack latency (commit included), indexed by req_id */
#define ACK_RING 65536
static uint64_t ack_sent[ACK_RING];
static uint32_t *ack_hist;
static uint64_t ack_n;

static void
hist_add(uint32_t *h, uint64_t lat)
{
	uint64_t b = lat / HBUCKET_NS;
	h[b < HBUCKETS ? b : HBUCKETS]++;
}

static double
hist_pct(const uint32_t *h, uint64_t n, double pct)
{
	uint64_t want = (uint64_t)((double)n * pct / 100.0), acc = 0;
	if (!n)
		return 0;
	for (size_t b = 0; b <= HBUCKETS; b++) {
		acc += h[b];
		if (acc > want || acc == n)
			return (double)(b + 1) * HBUCKET_NS / 1e9;
	}
	return 0;
}

/* Replies [type, req_id, body]: take the req_id of each whole frame. */
static void
ipc_consume(Conn *c, uint64_t now)
{
	size_t off = 0;
	while (c->len - off >= 4) {
		uint32_t n;
		memcpy(&n, c->buf + off, 4);
		n = ntohl(n);
		if (c->len - off < 4 + (size_t)n)
			break;
		const unsigned char *f = c->buf + off + 4;
		uint64_t id = 0;
		if (n >= 3 && f[0] == 0x93) {
			const unsigned char *q = f + 2;
			if (q[0] < 0x80)
				id = q[0];
			else if (q[0] == 0xcc)
				id = q[1];
			else if (q[0] == 0xcd)
				id = ((uint64_t)q[1] << 8) | q[2];
			else if (q[0] == 0xce)
				id = ((uint64_t)q[1] << 24) | ((uint64_t)q[2] << 16) |
				     ((uint64_t)q[3] << 8) | q[4];
			if (f[1] == 2 && measuring && ack_sent[id % ACK_RING]) {
				hist_add(ack_hist, now - ack_sent[id % ACK_RING]);
				ack_n++;
			}
		}
		off += 4 + n;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static void
ipc_send(int fd, Mp *body, int type)
{
	Mp f = {.n = 4};
	mp_byte(&f, 0x93);
	mp_byte(&f, (unsigned)type); /* < 128: positive fixint */
	mp_u32(&f, ipc_req++);
	memcpy(f.b + f.n, body->b, body->n);
	f.n += body->n;
	uint32_t len = htonl((uint32_t)(f.n - 4));
	memcpy(f.b, &len, 4);
	write_all(fd, f.b, f.n);
}

static char chunk[CHUNK_BYTES + 64];

static size_t
make_chunk(uint64_t t)
{
	int n = snprintf(chunk, sizeof(chunk),
			 "{\"type\":\"CUSTOM\",\"name\":\"b4\",\"value\":{\"t\":%llu,\"pad\":\"",
			 (unsigned long long)t);
	while (n < CHUNK_BYTES - 3)
		chunk[n++] = 'x';
	memcpy(chunk + n, "\"}}", 4);
	return (size_t)n + 3;
}

int
main(int argc, char **argv)
{
	if (argc < 8) {
		fprintf(stderr, "usage: ws-fanout rw|lws PORT K RATE WARM MEAS SERVER_PID "
				"[COORD_SOCK RUN_ID THREAD]\n");
		return 2;
	}
	int rw = strcmp(argv[1], "rw") == 0;
	port = atoi(argv[2]);
	int k = atoi(argv[3]);
	double rate = atof(argv[4]), warm = atof(argv[5]), meas = atof(argv[6]);
	int server_pid = atoi(argv[7]);
	if (rw && argc < 11)
		return 2;
	hist = calloc(HBUCKETS + 1, sizeof(*hist));
	ack_hist = calloc(HBUCKETS + 1, sizeof(*ack_hist));
	Conn *cs = calloc((size_t)k + 1, sizeof(*cs));
	int ep = epoll_create1(0);
	char path[512];
	const char *extra = "Sec-WebSocket-Protocol: lws-mirror-protocol\r\n";
	if (rw)
		snprintf(path, sizeof(path), "/runs/%s/stream?threadId=%s", argv[9], argv[10]);
	else
		snprintf(path, sizeof(path), "/");
	uint64_t tc0 = now_ns();
	for (int i = 0; i < k; i++) {
		cs[i].role = R_RECV;
		ws_handshake(&cs[i], path, rw ? "" : extra);
	}
	double connect_s = (double)(now_ns() - tc0) / 1e9;
	Conn *prod = &cs[k];
	if (rw) {
		prod->role = R_IPC;
		prod->fd = socket(AF_UNIX, SOCK_STREAM, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[8]);
		if (connect(prod->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect coordinatord");
		Mp h = {0};
		mp_byte(&h, 0x83);
		mp_str(&h, "version");
		mp_byte(&h, 1);
		mp_str(&h, "role");
		mp_str(&h, "client");
		mp_str(&h, "pid");
		mp_u32(&h, (uint32_t)getpid());
		ipc_send(prod->fd, &h, MSG_HELLO);
	} else {
		prod->role = R_WS_SENDER;
		ws_handshake(prod, "/", extra);
	}
	for (int i = 0; i <= k; i++) {
		fcntl(cs[i].fd, F_SETFL, fcntl(cs[i].fd, F_GETFL) | O_NONBLOCK);
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) < 0)
			die("epoll_ctl");
	}
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	long period = (long)(1e9 / rate);
	struct itimerspec its = {.it_interval = {period / 1000000000, period % 1000000000},
				 .it_value = {0, 1}};
	uint64_t t0 = now_ns();
	timerfd_settime(tfd, 0, &its, NULL);
	struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

	uint64_t warm_end = t0 + (uint64_t)(warm * 1e9),
		 meas_end = warm_end + (uint64_t)(meas * 1e9);
	uint64_t drain_end = meas_end + 500000000ull;
	double srv0 = 0, srv1 = 0, me0 = 0, me1 = 0;
	uint64_t mt0 = 0, mt1 = 0;
	long sent_total = 0, late_ticks = 0;
	struct epoll_event evs[256];
	for (;;) {
		uint64_t now = now_ns();
		if (!measuring && !mt0 && now >= warm_end) {
			srv0 = proc_cpu(server_pid);
			me0 = self_cpu();
			mt0 = now_ns();
			measuring = 1;
		}
		if (measuring && now >= meas_end) {
			srv1 = proc_cpu(server_pid);
			me1 = self_cpu();
			mt1 = now_ns();
			measuring = 0;
		}
		if (now >= drain_end)
			break;
		int n = epoll_wait(ep, evs, 256, 50);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		now = now_ns();
		for (int i = 0; i < n; i++) {
			Conn *c = evs[i].data.ptr;
			if (!c) {
				uint64_t ticks;
				if (read(tfd, &ticks, sizeof(ticks)) != sizeof(ticks))
					continue;
				if (ticks > 1)
					late_ticks += (long)ticks - 1;
				if (now >= meas_end)
					continue;
				for (uint64_t j = 0; j < ticks; j++) {
					/* the intended send time (wrk2-style: a late
					 * tick does not hide the delay) */
					uint64_t due = t0 + (uint64_t)sent_total * (uint64_t)period;
					size_t cl = make_chunk(due);
					if (rw) {
						Mp b = {0};
						mp_byte(&b, 0x82);
						mp_str(&b, "run_id");
						mp_str(&b, argv[9]);
						mp_str(&b, "chunk");
						mp_str(&b, chunk);
						ack_sent[ipc_req % ACK_RING] = due;
						ipc_send(prod->fd, &b, MSG_RUN_APPEND);
					} else {
						ws_send(prod->fd, 1, chunk, cl);
					}
					sent_total++;
					if (measuring)
						sent_meas++;
				}
				continue;
			}
			for (;;) {
				if (c->cap - c->len < 16384) {
					c->cap = c->cap < 65536 ? 65536 : c->cap * 2;
					c->buf = realloc(c->buf, c->cap);
				}
				ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (r <= 0) {
					epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
					closes++;
					break;
				}
				c->len += (size_t)r;
				if (c->role == R_IPC)
					ipc_consume(c, now);
				else
					ws_consume(c, now);
				if ((size_t)r < 16384)
					break;
			}
		}
	}
	double m = (double)(mt1 - mt0) / 1e9;
	double srv = srv1 - srv0, me = me1 - me0;
	double val[3] = {hist_pct(hist, lat_n, 50), hist_pct(hist, lat_n, 99),
			 hist_pct(hist, lat_n, 99.9)};
	printf(
	    "{\"server\":\"%s\",\"k\":%d,\"rate\":%.0f,\"warm_s\":%.1f,\"meas_s\":%.3f,"
	    "\"connect_s\":%.3f,\"sent\":%ld,\"sent_meas\":%ld,\"expected\":%ld,\"delivered\":%ld,"
	    "\"delivered_per_s\":%.1f,\"server_cpu_s\":%.3f,\"server_cpu_frac\":%.3f,"
	    "\"msgs_per_cpu_s\":%.1f,\"client_cpu_frac\":%.3f,\"p50\":%.6f,\"p99\":%.6f,"
	    "\"p999\":%.6f,\"max\":%.6f,\"late_ticks\":%ld,\"closes\":%ld,\"nondata\":%ld,"
	    "\"continuations\":%ld,"
	    "\"append_ack_p50\":%.6f,\"append_ack_p99\":%.6f}\n",
	    rw ? "routerd" : "lws", k, rate, warm, m, connect_s, sent_total, sent_meas,
	    sent_meas * k, delivered, (double)delivered / m, srv, srv / m,
	    srv > 0 ? (double)delivered / srv : 0.0, me / m, val[0], val[1], val[2],
	    (double)lat_max / 1e9, late_ticks, closes, nondata, continuations,
	    hist_pct(ack_hist, ack_n, 50), hist_pct(ack_hist, ack_n, 99));
	return 0;
}
