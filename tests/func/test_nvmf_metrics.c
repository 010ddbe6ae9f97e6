/* SPDX-License-Identifier: MIT */
/*
 * The target's Prometheus endpoint, scraped over a socket as Prometheus would:
 * the exposition format (every sample under a # HELP and # TYPE of its family,
 * histogram buckets cumulative and ending in +Inf), values after known I/O
 * (namespace bytes, controller commands, failures by NVMe status, latency
 * counts, queue bytes), counters that never go back between scrapes, and an
 * HTTP endpoint that answers only GET /metrics and is not held by a silent
 * client.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/util.h"

#define NQN "nqn.2026-11.io.gdx:metrics"
#define HOSTNQN "nqn.2026-11.io.gdx:metrics-host"

static struct gdx_nvmf_target *tgt;
static struct gdx_nvmf_metrics *met;
static char port[16];

static int setup(void **state)
{
	int p;

	(void)state;
	if (gdx_nvmf_target_create(NULL, &tgt) || gdx_nvmf_target_add_subsys(tgt, NQN, 1) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 1, "ram:4M", 4096) ||
	    gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0") || gdx_nvmf_target_link(tgt, 1, NQN) ||
	    gdx_nvmf_target_start(tgt) ||
	    gdx_nvmf_metrics_start(tgt, "127.0.0.1", "0", &met))
		return -1;
	p = gdx_nvmf_target_bound_port(tgt, 1);
	snprintf(port, sizeof(port), "%d", p);
	return p > 0 && gdx_nvmf_metrics_port(met) > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	gdx_nvmf_metrics_stop(met);
	gdx_nvmf_target_destroy(tgt);
	return 0;
}

static int dial(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)gdx_nvmf_metrics_port(met)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Sends req, returns the whole answer (malloc'd), read until the server closes. */
static char *http(const char *req)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int fd = dial();

	assert_non_null(buf);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		assert_int_equal(poll(&p, 1, 5000), 1);
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		r = recv(fd, buf + len, cap - len - 1, 0);
		assert_true(r >= 0);
		if (!r)
			break;
		len += (size_t)r;
	}
	buf[len] = 0;
	close(fd);
	return buf;
}

/*
 * Checks the exposition format of a 200 answer's body and returns the value of
 * the sample that starts with `series` (name and labels, as written), or -1.
 */
static double sample(const char *body, const char *series)
{
	const char *p = strstr(body, series);

	while (p && p != body && p[-1] != '\n')
		p = strstr(p + 1, series);
	if (!p || p[strlen(series)] != ' ')
		return -1;
	return strtod(p + strlen(series) + 1, NULL);
}

static char *scrape(void)
{
	char *r = http("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), *body;
	char fam[128] = "", type[16] = "";

	assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
	body = strstr(r, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	assert_int_equal(strtoul(strstr(r, "Content-Length: ") + 16, NULL, 10), strlen(body));
	/* every sample belongs to the family of the # TYPE line above it */
	for (char *l = body, *nl; *l; l = nl + 1) {
		nl = strchr(l, '\n');
		assert_non_null(nl);
		if (!strncmp(l, "# HELP ", 7)) {
			assert_int_equal(sscanf(l, "# HELP %127s", fam), 1);
		} else if (!strncmp(l, "# TYPE ", 7)) {
			char name[128];

			assert_int_equal(sscanf(l, "# TYPE %127s %15s", name, type), 2);
			assert_string_equal(name, fam);
			assert_true(!strcmp(type, "counter") || !strcmp(type, "histogram"));
		} else {
			size_t n = strlen(fam);

			assert_true(n && !strncmp(l, fam, n));
			if (!strcmp(type, "counter"))
				assert_true(l[n] == ' ' || l[n] == '{');
			else
				assert_true(!strncmp(l + n, "_bucket{", 8) ||
					    !strncmp(l + n, "_sum{", 5) || !strncmp(l + n, "_count{", 7));
			assert_non_null(memrchr(l, ' ', (size_t)(nl - l)));
			assert_true(strtod((char *)memrchr(l, ' ', (size_t)(nl - l)) + 1, NULL) >= 0);
		}
	}
	memmove(r, body, strlen(body) + 1);
	return r;
}

/* Every sample of a that b has too is no larger in a: counters never go back. */
static void monotonic(const char *a, const char *b)
{
	unsigned seen = 0;

	for (const char *l = a, *nl; *l; l = nl + 1) {
		char series[1024];
		const char *sp;
		double vb;

		nl = strchr(l, '\n');
		if (*l == '#')
			continue;
		sp = memrchr(l, ' ', (size_t)(nl - l));
		assert_true(sp && sp < nl && (size_t)(sp - l) < sizeof(series));
		snprintf(series, sizeof(series), "%.*s", (int)(sp - l), l);
		vb = sample(b, series);
		if (vb < 0)
			continue;	/* a controller that left */
		assert_true(vb >= strtod(sp + 1, NULL));
		seen++;
	}
	assert_true(seen > 20);
}

#define CTRL "{subnqn=\"" NQN "\",hostnqn=\"" HOSTNQN "\",cntlid=\"%u\""
#define IOQ CTRL ",qid=\"1\""

static void test_scrape(void **state)
{
	struct gdx_nvmf_host_opts ho;
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ctrl *c;
	char series[512], *before, *after, *empty;
	uint8_t *buf = aligned_alloc(4096, 1 << 20);
	double was, count, fast;

	(void)state;
	assert_non_null(buf);
	memset(buf, 0x5a, 1 << 20);
	empty = scrape();
	assert_non_null(strstr(empty, "# TYPE gdx_nvmf_target_connections_total counter\n"));
	assert_non_null(strstr(empty, "# TYPE gdx_nvmf_queue_command_latency_seconds histogram\n"));
	gdx_nvmf_host_opts_init(&ho, sizeof(ho));
	ho.hostnqn = HOSTNQN;
	ho.nr_io_queues = 1;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &ho, &c), 0);
	gdx_nvmf_ctrl_info(c, &in);

	assert_int_equal(gdx_nvmf_write(c, 1, buf, 1 << 20, 0), 0);
	before = scrape();
	assert_true(sample(before, "gdx_nvmf_namespace_write_bytes_total{subnqn=\"" NQN
				   "\",nsid=\"1\"}") == 1 << 20);
	/* the I/O queue took the data, and the Connect's 1 KiB before it */
	snprintf(series, sizeof(series), "gdx_nvmf_queue_bytes_in_total" IOQ "}", in.cntlid);
	assert_true(sample(before, series) == (1 << 20) + 1024);

	/* 8 reads of 128 KiB, then one past the end */
	for (int i = 0; i < 8; i++)
		assert_int_equal(gdx_nvmf_read(c, 1, buf, 128 << 10, (uint64_t)i << 17), 0);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, 4096, 4 << 20), GDX_E_NVME(0x80));
	after = scrape();
	monotonic(before, after);
	assert_true(sample(after, "gdx_nvmf_namespace_read_bytes_total{subnqn=\"" NQN
				  "\",nsid=\"1\"}") == 1 << 20);
	/* all the bytes sent: the data and the PDUs around it */
	snprintf(series, sizeof(series), "gdx_nvmf_queue_bytes_out_total" IOQ "}", in.cntlid);
	assert_true(sample(after, series) - sample(before, series) >= 1 << 20);
	assert_true(sample(after, series) - sample(before, series) < (1 << 20) + 65536);
	snprintf(series, sizeof(series), "gdx_nvmf_queue_commands_total" IOQ "}", in.cntlid);
	assert_true(sample(after, series) == sample(before, series) + 9);
	snprintf(series, sizeof(series), "gdx_nvmf_queue_failed_commands_total" IOQ
		 ",status=\"0x80\",name=\"LBA Out of Range\"}", in.cntlid);
	assert_true(sample(after, series) == 1);
	snprintf(series, sizeof(series), "gdx_nvmf_controller_commands_total" CTRL "}", in.cntlid);
	assert_true(sample(after, series) >= sample(before, series) + 9);
	/* the target's PDU counts (added per pass, not per PDU) are all in by the reply */
	assert_true(sample(after, "gdx_nvmf_target_pdus_in_total") >=
		    sample(before, "gdx_nvmf_target_pdus_in_total") + 9);
	assert_true(sample(after, "gdx_nvmf_target_pdus_out_total") >=
		    sample(before, "gdx_nvmf_target_pdus_out_total") + 9);

	/* the I/O queue's histogram counted the 9 commands; +Inf is the count */
	snprintf(series, sizeof(series), "gdx_nvmf_queue_command_latency_seconds_count" IOQ "}",
		 in.cntlid);
	count = sample(after, series);
	was = sample(before, series);
	assert_true(count == was + 9);
	snprintf(series, sizeof(series),
		 "gdx_nvmf_queue_command_latency_seconds_bucket" IOQ ",le=\"+Inf\"}", in.cntlid);
	assert_true(sample(after, series) == count);
	snprintf(series, sizeof(series),
		 "gdx_nvmf_queue_command_latency_seconds_bucket" IOQ ",le=\"1e-05\"}", in.cntlid);
	fast = sample(after, series);
	assert_true(fast >= 0 && fast <= count);
	snprintf(series, sizeof(series), "gdx_nvmf_queue_command_latency_seconds_sum" IOQ "}",
		 in.cntlid);
	assert_true(sample(after, series) > sample(before, series));
	gdx_nvmf_disconnect(c);
	free(before);
	free(after);
	free(empty);
	free(buf);
}

static void test_http(void **state)
{
	char *r;
	int idle;

	(void)state;
	r = http("POST /metrics HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 405 "));
	assert_non_null(strstr(r, "Allow: GET\r\n"));
	free(r);
	r = http("GET / HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 404 "));
	free(r);
	r = http("GET /metricsfoo HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 404 "));
	free(r);
	/* a client that never sends its request is let go; the next one is answered */
	idle = dial();
	{
		uint64_t t0 = gdx_now_ns();

		free(scrape());
		assert_true(gdx_now_ns() - t0 < 4000000000ull);
	}
	close(idle);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scrape),
		cmocka_unit_test(test_http),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
