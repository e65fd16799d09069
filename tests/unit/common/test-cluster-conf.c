/* SPDX-License-Identifier: MIT */
/*
 * test-cluster-conf.c — common/cluster-conf.c: the [cluster] values
 * the table accepts (URLs, node names), the keys that bound each other, the
 * node name's default, and the section through the real parser (file:line).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cluster-conf.h"
#include "conf-parser.h"
#include "macro.h"
#include "shared-conf.h"
#include "strv.h"

typedef struct T {
	SharedConf shared;
} T;

static const ConfItem items[] = {CONF_SHARED_ITEMS(T, shared)};

static void
test_urls(void **state)
{
	assert_true(cluster_conf_valid_urls("nats://127.0.0.1:4222"));
	assert_true(cluster_conf_valid_urls("nats://h1:4222,nats://h2.example:4222 tls://h3:4223"));
	assert_true(cluster_conf_valid_urls("tls://runwarden@h1:4222"));
	assert_true(cluster_conf_valid_urls("nats://[fd00::1]:4222"));
	assert_false(cluster_conf_valid_urls(""));
	assert_false(cluster_conf_valid_urls(", ,"));
	assert_false(cluster_conf_valid_urls("http://h1:4222"));
	assert_false(cluster_conf_valid_urls("h1:4222"));
	assert_false(cluster_conf_valid_urls("nats://h1"));
	assert_false(cluster_conf_valid_urls("nats://h1:0"));
	assert_false(cluster_conf_valid_urls("nats://h1:65536"));
	assert_false(cluster_conf_valid_urls("nats://h1:42x"));
	assert_false(cluster_conf_valid_urls("nats://user:secret@h1:4222")); /* no passwords */
	assert_false(cluster_conf_valid_urls("nats://[fd00::1]4222"));
	assert_false(cluster_conf_valid_urls("nats://h1:4222,http://h2:4222"));
}

static void
test_node(void **state)
{
	assert_true(cluster_conf_valid_node("h1"));
	assert_true(cluster_conf_valid_node("node-A_2"));
	assert_false(cluster_conf_valid_node(""));
	assert_false(cluster_conf_valid_node("h1.example.com")); /* a subject token */
	assert_false(cluster_conf_valid_node("a b"));
	assert_false(cluster_conf_valid_node("a*"));
	char long_name[70];
	memset(long_name, 'a', 65);
	long_name[65] = 0;
	assert_false(cluster_conf_valid_node(long_name));
	long_name[64] = 0;
	assert_true(cluster_conf_valid_node(long_name));
}

static void
test_section(void **state)
{
	T t = {0};
	char err[512];
	assert_int_equal(conf_apply_defaults(items, ELEMENTSOF(items), &t), 0);
	assert_false(cluster_conf_enabled(&t.shared.cluster));
	assert_int_equal(t.shared.cluster.replicas, 3);
	assert_int_equal(cluster_conf_check(&t.shared.cluster), 0);

	assert_int_equal(conf_load_string(items, ELEMENTSOF(items), &t, "x.conf",
					  "[cluster]\nnats = nats://a:1, nats://b:2\nnode = n1\n",
					  err, sizeof(err)),
			 0);
	assert_true(cluster_conf_enabled(&t.shared.cluster));
	char **urls = NULL;
	assert_int_equal(cluster_conf_urls(&t.shared.cluster, &urls), 0);
	assert_string_equal(urls[0], "nats://a:1");
	assert_string_equal(urls[1], "nats://b:2");
	assert_null(urls[2]);
	strv_free(urls);
	char node[CLUSTER_NODE_NAME_MAX];
	assert_int_equal(cluster_conf_node_name(&t.shared.cluster, node, sizeof(node)), 0);
	assert_string_equal(node, "n1");

	assert_int_equal(conf_load_string(items, ELEMENTSOF(items), &t, "x.conf",
					  "[cluster]\n\nnats = nats://a\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "x.conf:3: nats: 'nats://a'"));

	/* bounds across keys */
	t.shared.cluster.heartbeat_ms = 5000;
	t.shared.cluster.node_ttl_ms = 6000;
	assert_int_equal(cluster_conf_check(&t.shared.cluster), -EINVAL);
	t.shared.cluster.node_ttl_ms = 15000;
	assert_int_equal(cluster_conf_check(&t.shared.cluster), 0);
	free(t.shared.cluster.tls_cert);
	t.shared.cluster.tls_cert = strdup("/c.pem");
	assert_int_equal(cluster_conf_check(&t.shared.cluster), -EINVAL);
	conf_free_strings(items, ELEMENTSOF(items), &t);
}

static void
test_node_default_is_the_host_name(void **state)
{
	ClusterConf c = {.node = (char *)""};
	char node[CLUSTER_NODE_NAME_MAX];
	assert_int_equal(cluster_conf_node_name(&c, node, sizeof(node)), 0);
	assert_true(cluster_conf_valid_node(node));
	assert_null(strchr(node, '.'));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_urls),
	    cmocka_unit_test(test_node),
	    cmocka_unit_test(test_section),
	    cmocka_unit_test(test_node_default_is_the_host_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
