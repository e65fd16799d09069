/* SPDX-License-Identifier: MIT */
/*
 * metrics.c — routerd's counters in the Prometheus text exposition format
 * (version 0.0.4): one # HELP and one # TYPE line per family, then its
 * samples. coordinatord's families follow in the same response (routes.c).
 */
#include "config.h"

#include "routes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const drop_names[_WS_DROP_MAX] = {
    [WS_DROP_NONE] = "normal",
    [WS_DROP_SLOW] = "slow_consumer",
    [WS_DROP_PROTOCOL] = "protocol_error",
    [WS_DROP_PING] = "ping_timeout",
    [WS_DROP_SHUTDOWN] = "shutdown",
    [WS_DROP_ERROR] = "internal_error",
    [WS_DROP_LOST] = "connection_lost",
};

int
metrics_format(const Router *r, bool coord_up, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -ENOMEM;
	fputs("# HELP runwarden_router_http_responses_total HTTP responses sent by routerd, by "
	      "status class.\n"
	      "# TYPE runwarden_router_http_responses_total counter\n",
	      f);
	for (int k = 1; k <= 5; k++)
		fprintf(f, "runwarden_router_http_responses_total{code=\"%dxx\"} %" PRIu64 "\n", k,
			r->http_responses[k]);
	fprintf(f,
		"# HELP runwarden_router_open_connections Client connections open (HTTP, "
		"WebSocket and SSE).\n"
		"# TYPE runwarden_router_open_connections gauge\n"
		"runwarden_router_open_connections %zu\n"
		"# HELP runwarden_router_live_tails Run-log tails being served (WebSocket and "
		"SSE).\n"
		"# TYPE runwarden_router_live_tails gauge\n"
		"runwarden_router_live_tails %zu\n"
		"# HELP runwarden_router_tails_queued_bytes Unsent output of all tails, as last "
		"seen (tails_max_queued_bytes bounds it).\n"
		"# TYPE runwarden_router_tails_queued_bytes gauge\n"
		"runwarden_router_tails_queued_bytes %zu\n"
		"# HELP runwarden_router_tails_budget_closed_total Tails closed (1013) because all "
		"tails together held more than tails_max_queued_bytes.\n"
		"# TYPE runwarden_router_tails_budget_closed_total counter\n"
		"runwarden_router_tails_budget_closed_total %" PRIu64 "\n"
		"# HELP runwarden_router_ws_closes_total WebSocket sessions ended, by reason "
		"(everything but normal is a drop).\n"
		"# TYPE runwarden_router_ws_closes_total counter\n",
		r->n_conns, r->n_tails, r->tails_queued, r->tails_budget_closed);
	for (int d = 0; d < _WS_DROP_MAX; d++)
		fprintf(f, "runwarden_router_ws_closes_total{reason=\"%s\"} %" PRIu64 "\n",
			drop_names[d], r->ws_drops[d]);
	fprintf(f,
		"# HELP runwarden_router_connections_refused_total Connections closed at accept "
		"because their address held max_unserved_per_address connections without a "
		"request head.\n"
		"# TYPE runwarden_router_connections_refused_total counter\n"
		"runwarden_router_connections_refused_total %" PRIu64 "\n"
		"# HELP runwarden_router_coordinator_up Whether coordinatord answered routerd's "
		"status request.\n"
		"# TYPE runwarden_router_coordinator_up gauge\n"
		"runwarden_router_coordinator_up %d\n",
		r->conns_refused, coord_up ? 1 : 0);
	tenant_rate_metrics(r, f);
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}
