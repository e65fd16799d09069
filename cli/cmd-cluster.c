/* SPDX-License-Identifier: MIT */
/*
 * cmd-cluster.c — `runwarden cluster status`: the cluster's nodes, their
 * load and the threads each owns, read from NATS JetStream directly
 * (docs/CLUSTER.md "runwarden cluster status").
 *
 * It reads the [cluster] section of runwarden.conf (the daemons' default
 * file, or --config FILE, repeatable and layered as the daemons do), connects
 * as a client that neither heartbeats nor writes, lists rw_nodes (a node with
 * a key is alive: the bucket's TTL removes a silent one) and rw_threads (each
 * thread's owner), and prints one line per node: alive or lost (a lost node
 * still named as an owner: its threads wait for a takeover), its load (what
 * its heartbeats carry: runs, sandboxes) and how many threads it owns; with
 * --threads each thread too; with --json the whole of it.
 *
 * Why NATS directly and not a daemon: the status is the cluster's, not one
 * node's, and it must be readable when the local daemons are down (that is
 * when one asks). Without [cluster] nats it says so and exits 1.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cluster.h"
#include "conf-parser.h"
#include "log.h"
#include "macro.h"
#include "shared-conf.h"
#include "strv.h"
#include "time-util.h"

#define LIST_WAIT_MS 15000

typedef struct StatusConf {
	SharedConf shared;
} StatusConf;

static const ConfItem status_items[] = {CONF_SHARED_ITEMS(StatusConf, shared)};

typedef struct Listed {
	bool done;
	int err;
	json_t *kv; /* {key: {"value": text, "revision": n}} */
} Listed;

static void
list_cb(Cluster *c, int err, const ClusterKv *kv, size_t n, void *ud)
{
	Listed *l = ud;
	l->err = err;
	for (size_t i = 0; i < n; i++)
		json_object_set_new(l->kv, kv[i].key,
				    json_pack("{s:s%, s:I}", "value", (const char *)kv[i].value,
					      kv[i].len, "revision", (json_int_t)kv[i].revision));
	l->done = true;
}

static int
load_conf(char **paths, size_t n, StatusConf *sc)
{
	char err[512];
	int r = conf_apply_defaults(status_items, ELEMENTSOF(status_items), sc);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = conf_load_file(status_items, ELEMENTSOF(status_items), sc, paths[i], err,
				   sizeof(err));
		if (r == -ENOENT) {
			fprintf(stderr, "runwarden: cluster status: %s: no such file\n", paths[i]);
			return r;
		}
		if (r < 0) {
			fprintf(stderr, "runwarden: cluster status: %s\n", err);
			return r;
		}
	}
	return cluster_conf_check(&sc->shared.cluster);
}

static void
print_text(json_t *nodes, json_t *threads, bool list_threads)
{
	json_auto_t *all = json_object();
	const char *k;
	json_t *v;

	/* every node: alive (a key) or named as an owner */
	json_object_foreach(nodes, k, v) json_object_set_new(all, k, json_integer(0));
	json_object_foreach(threads, k, v)
	{
		const char *owner = json_string_value(json_object_get(v, "value"));
		json_t *n = owner ? json_object_get(all, owner) : NULL;
		if (owner && !n)
			json_object_set_new(all, owner, json_integer(1));
		else if (n)
			json_integer_set(n, json_integer_value(n) + 1);
	}
	printf("%-20s %-6s %6s %8s %10s %8s\n", "NODE", "STATE", "RUNS", "MAX_RUNS", "SANDBOXES",
	       "THREADS");
	json_object_foreach(all, k, v)
	{
		json_t *hb = json_object_get(nodes, k);
		json_auto_t *info =
		    hb ? json_loads(json_string_value(json_object_get(hb, "value")), 0, NULL)
		       : NULL;
		json_t *runs = json_object_get(info, "runs"),
		       *sandboxes = json_object_get(info, "sandboxes"),
		       *max = json_object_get(info, "max_runs");
		char r[24] = "-", s[24] = "-", m[24] = "-";
		if (json_is_integer(runs))
			snprintf(r, sizeof(r), "%" JSON_INTEGER_FORMAT, json_integer_value(runs));
		/* its capacity ([cluster] max_runs): 0 is "no limit" */
		if (json_is_integer(max) && json_integer_value(max) > 0)
			snprintf(m, sizeof(m), "%" JSON_INTEGER_FORMAT, json_integer_value(max));
		else if (json_is_integer(max))
			snprintf(m, sizeof(m), "none");
		if (json_is_integer(sandboxes))
			snprintf(s, sizeof(s), "%" JSON_INTEGER_FORMAT,
				 json_integer_value(sandboxes));
		printf("%-20s %-6s %6s %8s %10s %8" JSON_INTEGER_FORMAT "\n", k,
		       hb ? "alive" : "lost", r, m, s, json_integer_value(v));
	}
	if (!list_threads)
		return;
	printf("\n%-40s %-20s %s\n", "THREAD", "OWNER", "EPOCH");
	json_object_foreach(threads, k, v)
	    printf("%-40s %-20s %" JSON_INTEGER_FORMAT "\n", k,
		   json_string_value(json_object_get(v, "value")),
		   json_integer_value(json_object_get(v, "revision")));
}

int
cmd_cluster(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"threads", no_argument, NULL, 'a'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	char **paths = NULL;
	size_t n_paths = 0;
	bool list_threads = false;
	int o;

	optind = 0;
	while ((o = getopt_long(argc, argv, "c:aj", opts, NULL)) >= 0) {
		switch (o) {
		case 'c':
			if (strv_push(&paths, optarg) < 0)
				return 125;
			n_paths++;
			break;
		case 'a': list_threads = true; break;
		case 'j': cli.json = true; break;
		default: return 2;
		}
	}
	if (optind != argc - 1 || !streq(argv[optind], "status")) {
		fprintf(stderr, "runwarden: usage: cluster status [--config FILE]... [--threads] "
				"[--json]\n");
		strv_free(paths);
		return 2;
	}
	if (!paths && strv_push(&paths, RW_DEFAULT_CONF) < 0)
		return 125;
	n_paths += !n_paths;

	StatusConf sc = {0};
	if (load_conf(paths, n_paths, &sc) < 0) {
		strv_free(paths);
		return 125;
	}
	if (!cluster_conf_enabled(&sc.shared.cluster)) {
		fprintf(stderr,
			"runwarden: cluster status: no [cluster] nats in the configuration (%s): "
			"this runwarden is a single host\n",
			paths[n_paths - 1]);
		conf_free_strings(status_items, ELEMENTSOF(status_items), &sc);
		strv_free(paths);
		return 1;
	}

	log_set_max_level(LOG_WARNING); /* the library's notices are not the output */
	char **urls = NULL;
	struct event_base *base = NULL;
	Cluster *c = NULL;
	char node[64];
	snprintf(node, sizeof(node), "cli-%ld", (long)getpid());
	const ClusterConf *cc = &sc.shared.cluster;
	int r = cluster_conf_urls(cc, &urls);
	if (r == 0)
		r = cluster_global_init();
	if (r == 0 && !(base = event_base_new()))
		r = -ENOMEM;
	ClusterOptions co = cluster_conf_options(cc, urls, node);
	co.heartbeat_ms = 0; /* a reader, not a node: no heartbeats */
	co.connect_wait_ms = LIST_WAIT_MS;
	if (r == 0)
		r = cluster_new(base, &co, &(ClusterCallbacks){0}, NULL, &c);
	while (r == 0 && cluster_state(c) == CLUSTER_CONNECTING)
		event_base_loop(base, EVLOOP_ONCE);
	if (r == 0 && !cluster_ready(c))
		r = -ENOTCONN;
	Listed nodes = {.kv = json_object()}, threads = {.kv = json_object()};
	/* a bucket without a leader for a moment (a NATS server was just lost)
	 * answers nothing: try again for a while */
	for (usec_t until = now_usec() + LIST_WAIT_MS * USEC_PER_MSEC; r == 0;) {
		nodes.done = threads.done = false;
		json_object_clear(nodes.kv);
		json_object_clear(threads.kv);
		r = cluster_list(c, CLUSTER_NODES, list_cb, &nodes);
		if (r == 0)
			r = cluster_list(c, CLUSTER_THREADS, list_cb, &threads);
		while (r == 0 && !(nodes.done && threads.done))
			event_base_loop(base, EVLOOP_ONCE);
		if (r == 0)
			r = nodes.err < 0 ? nodes.err : threads.err;
		if (r == 0 || now_usec() >= until)
			break;
		r = 0;
		usleep(500 * 1000);
	}
	if (r < 0)
		fprintf(stderr, "runwarden: cluster status: cannot read the cluster (%s): %s\n",
			cc->nats, strerror(-r));
	else if (cli.json) {
		json_auto_t *out =
		    json_pack("{s:O, s:O}", "nodes", nodes.kv, "threads", threads.kv);
		char *s = json_dumps(out, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (s)
			puts(s);
		free(s);
	} else
		print_text(nodes.kv, threads.kv, list_threads);
	json_decref(nodes.kv);
	json_decref(threads.kv);
	cluster_free(c);
	if (base)
		event_base_free(base);
	conf_free_strings(status_items, ELEMENTSOF(status_items), &sc);
	strv_free(urls);
	strv_free(paths);
	return r < 0 ? 125 : 0;
}
