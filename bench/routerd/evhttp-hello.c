/* SPDX-License-Identifier: MIT */
/* B7's reference: the smallest libevent evhttp server, answering every
 * request with a fixed JSON body. usage: evhttp-hello PORT */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>

static void
cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *b = evbuffer_new();
	evbuffer_add(b, "{\"status\":\"ok\"}", 15);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "application/json; charset=utf-8");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

int
main(int argc, char **argv)
{
	struct event_base *base = event_base_new();
	struct evhttp *http = evhttp_new(base);

	if (argc < 2 || !base || !http)
		return 1;
	evhttp_set_gencb(http, cb, NULL);
	if (evhttp_bind_socket(http, "127.0.0.1", (unsigned short)atoi(argv[1])) != 0)
		return 1;
	event_base_dispatch(base);
	return 0;
}
