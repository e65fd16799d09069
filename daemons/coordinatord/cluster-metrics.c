/* SPDX-License-Identifier: MIT */
/*
 * cluster-metrics.c — the cluster's lines of /metrics (docs/CLUSTER.md
 * "Metrics"), with [cluster] nats set: this node's view of the cluster
 * (nodes alive, threads it owns) and what its replicate step, takeovers and
 * retention did (counters in Coordinator.m, kept by replicate.c and
 * takeover.c).
 */
#include "config.h"

#include "cluster-mode.h"

#include <inttypes.h>
#include <stdio.h>

#include "cluster/cluster.h"

static void
count_node(Cluster *cl, const char *node, const char *info, void *userdata)
{
	(*(size_t *)userdata)++;
}

void
cluster_metrics(Coordinator *c, FILE *mf)
{
	static const double le[CLUSTER_PUB_BUCKETS - 1] = {0.0005, 0.001, 0.0025, 0.005,
							   0.01,   0.025, 0.1};
	const Metrics *m = &c->m;
	size_t alive = 0;

	if (!c->cluster)
		return;
	cluster_foreach_node(c->cluster, count_node, &alive);
	fprintf(mf,
		"# HELP runwarden_cluster_ready 1 while this node's NATS JetStream connection is "
		"ready.\n"
		"# TYPE runwarden_cluster_ready gauge\n"
		"runwarden_cluster_ready %d\n"
		"# HELP runwarden_cluster_nodes_alive Nodes whose heartbeat this node sees "
		"(itself included).\n"
		"# TYPE runwarden_cluster_nodes_alive gauge\n"
		"runwarden_cluster_nodes_alive %zu\n"
		"# HELP runwarden_cluster_threads_owned Threads this node knows it owns (claimed "
		"or taken over, under its current lease).\n"
		"# TYPE runwarden_cluster_threads_owned gauge\n"
		"runwarden_cluster_threads_owned %zu\n"
		"# HELP runwarden_cluster_runs_taken_over_total Lost nodes' runs this node "
		"ended node_lost.\n"
		"# TYPE runwarden_cluster_runs_taken_over_total counter\n"
		"runwarden_cluster_runs_taken_over_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_runs_fenced_total Runs stopped here because another "
		"node wrote their log (fenced).\n"
		"# TYPE runwarden_cluster_runs_fenced_total counter\n"
		"runwarden_cluster_runs_fenced_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_replication_failures_total Runs failed "
		"replication_failed: their events were not acknowledged.\n"
		"# TYPE runwarden_cluster_replication_failures_total counter\n"
		"runwarden_cluster_replication_failures_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_runs_purged_total Runs purged from JetStream and "
		"rw_runs by retention.\n"
		"# TYPE runwarden_cluster_runs_purged_total counter\n"
		"runwarden_cluster_runs_purged_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_purge_failures_total Purges that failed (the "
		"streams' max age removes those runs later).\n"
		"# TYPE runwarden_cluster_purge_failures_total counter\n"
		"runwarden_cluster_purge_failures_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_publish_seconds A run's batch of events from its "
		"publish to JetStream's acknowledgement.\n"
		"# TYPE runwarden_cluster_publish_seconds histogram\n",
		cluster_ready(c->cluster) ? 1 : 0, alive, placement_owned_count(c),
		m->cluster_runs_taken_over, m->cluster_fenced, m->cluster_repl_failures,
		m->cluster_purged, m->cluster_purge_failures);
	uint64_t cum = 0;
	for (int i = 0; i < CLUSTER_PUB_BUCKETS - 1; i++) {
		cum += m->cluster_publish_buckets[i];
		fprintf(mf, "runwarden_cluster_publish_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
			le[i], cum);
	}
	cum += m->cluster_publish_buckets[CLUSTER_PUB_BUCKETS - 1];
	fprintf(mf,
		"runwarden_cluster_publish_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n"
		"runwarden_cluster_publish_seconds_sum %.6f\n"
		"runwarden_cluster_publish_seconds_count %" PRIu64 "\n",
		cum, (double)m->cluster_publish_usec_sum / 1e6, m->cluster_publishes);
	fprintf(mf,
		"# HELP runwarden_cluster_owner_known_total Requests forwarded to the node "
		"remembered as their thread's owner (no claim, no owner look-up).\n"
		"# TYPE runwarden_cluster_owner_known_total counter\n"
		"runwarden_cluster_owner_known_total %" PRIu64 "\n"
		"# HELP runwarden_cluster_owner_stale_total Of those, the ones the remembered "
		"node did not serve (not_owner, not running): forgotten, asked again.\n"
		"# TYPE runwarden_cluster_owner_stale_total counter\n"
		"runwarden_cluster_owner_stale_total %" PRIu64 "\n",
		m->cluster_owner_known, m->cluster_owner_stale);
}
