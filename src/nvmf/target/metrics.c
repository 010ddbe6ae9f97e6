/* SPDX-License-Identifier: MIT */
/*
 * The target's counters in the Prometheus text exposition format (0.0.4),
 * served over a minimal HTTP/1.1 endpoint: GET /metrics, one client at a time
 * on its own thread, each given a couple of seconds to send its request and
 * take the answer.  Scrapes are rare (seconds apart) and cheap (the counters
 * are read where they live, no copy is kept), so nothing here is on the
 * reactors' path except nvmf_sq_account at a command's completion.
 *
 * Families: target totals; per namespace (subnqn, nsid) reads, writes,
 * bytes, flushes, errors; per controller (subnqn, hostnqn, cntlid) commands,
 * errors, keep-alives, AENs; per queue (the controller's labels and qid)
 * commands, errors, bytes, failed commands by NVMe status and a histogram of
 * command latency.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gdx/nvmf.h>

#include "common/log.h"
#include "common/sock.h"
#include "common/util.h"
#include "nvmf/proto/nvme.h"
#include "nvmf/target/tcp.h"

/* Upper bounds of the latency buckets, in microseconds. */
static const uint32_t lat_bounds_us[NVMF_LAT_BUCKETS] = {
	10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
	500000, 1000000,
};

void nvmf_sq_account(struct nvmf_sq *sq, const struct nvmf_req *req, uint16_t status)
{
	struct nvmf_timing *tm = &sq->timing;
	unsigned i;

	if (req->t_start) {
		uint64_t ns = gdx_now_ns() - req->t_start;

		for (i = 0; i < NVMF_LAT_BUCKETS && ns > lat_bounds_us[i] * 1000ull; i++)
			;
		gdx_counter_add(&tm->lat[i], 1);
		gdx_counter_add(&tm->lat_sum_ns, ns);
	}
	if (!(status & 0x7ff))
		return;
	/* a slot per distinct status, claimed once (a backend may complete off the reactor) */
	for (i = 0; i < NVMF_STATUS_SLOTS; i++) {
		uint16_t cur = atomic_load_explicit(&tm->status[i], memory_order_relaxed);

		if (!cur && atomic_compare_exchange_strong(&tm->status[i], &cur, status & 0x7ff))
			break;
		if (cur == (status & 0x7ff))
			break;
	}
	gdx_counter_add(&tm->failed[i], 1);
}

/* ---- the text format ---------------------------------------------------------------- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label(FILE *f, const char *key, const char *v, bool more)
{
	fprintf(f, "%s=\"", key);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
	fputs(more ? "\"," : "\"", f);
}

/* subnqn, hostnqn, cntlid and, for a queue, qid */
static void ctrl_labels(FILE *f, const struct nvmf_ctrl *c, const struct nvmf_sq *sq)
{
	char id[8];

	snprintf(id, sizeof(id), "%u", c->cntlid);
	label(f, "subnqn", c->subsys->nqn, true);
	label(f, "hostnqn", c->hostnqn, true);
	label(f, "cntlid", id, sq != NULL);
	if (sq) {
		snprintf(id, sizeof(id), "%u", sq->qid);
		label(f, "qid", id, false);
	}
}

/* Every connected queue of every controller, under the target's lock. */
#define for_each_sq(core, c, sq, q)                                                          \
	for (struct nvmf_ctrl *c = (core)->ctrls; c; c = c->next)                            \
		for (unsigned q = 0; q <= NVMF_MAX_IO_QUEUES; q++)                           \
			for (const struct nvmf_sq *sq = c->sqs[q]; sq; sq = NULL)

static const struct {
	const char *name, *help;
	unsigned idx;
} tgt_fams[] = {
	{ "gdx_nvmf_target_connections_total", "TCP connections accepted", TGT_CTR_CONNS },
	{ "gdx_nvmf_target_connection_errors_total", "connections ended by an error",
	  TGT_CTR_CONN_ERRORS },
	{ "gdx_nvmf_target_pdus_in_total", "NVMe/TCP PDUs received", TGT_CTR_PDUS_IN },
	{ "gdx_nvmf_target_pdus_out_total", "NVMe/TCP PDUs sent", TGT_CTR_PDUS_OUT },
}, ns_fams[] = {
	{ "gdx_nvmf_namespace_reads_total", "read commands", NS_CTR_READS },
	{ "gdx_nvmf_namespace_writes_total", "write commands", NS_CTR_WRITES },
	{ "gdx_nvmf_namespace_read_bytes_total", "bytes read", NS_CTR_READ_BYTES },
	{ "gdx_nvmf_namespace_write_bytes_total", "bytes written", NS_CTR_WRITE_BYTES },
	{ "gdx_nvmf_namespace_flushes_total", "flush commands", NS_CTR_FLUSHES },
	{ "gdx_nvmf_namespace_errors_total", "commands that failed", NS_CTR_ERRORS },
}, ctrl_fams[] = {
	{ "gdx_nvmf_controller_commands_total", "commands received", CTRL_CTR_CMDS },
	{ "gdx_nvmf_controller_errors_total", "commands completed with an error status",
	  CTRL_CTR_ERRORS },
	{ "gdx_nvmf_controller_keep_alives_total", "Keep Alive commands", CTRL_CTR_KA },
	{ "gdx_nvmf_controller_aens_total", "asynchronous events sent", CTRL_CTR_AENS },
}, queue_fams[] = {
	{ "gdx_nvmf_queue_commands_total", "commands received", SQ_CTR_CMDS },
	{ "gdx_nvmf_queue_errors_total", "commands completed with an error status",
	  SQ_CTR_ERRORS },
	{ "gdx_nvmf_queue_bytes_in_total", "data bytes received (in-capsule and H2CData)",
	  SQ_CTR_BYTES_IN },
	{ "gdx_nvmf_queue_bytes_out_total", "bytes sent (PDUs and their data)",
	  SQ_CTR_BYTES_OUT },
};

static void queue_families(FILE *f, struct nvmf_tgt *core)
{
	for (size_t k = 0; k < GDX_ARRAY_SIZE(queue_fams); k++) {
		family(f, queue_fams[k].name, "counter", queue_fams[k].help);
		for_each_sq(core, c, sq, q) {
			fprintf(f, "%s{", queue_fams[k].name);
			ctrl_labels(f, c, sq);
			fprintf(f, "} %llu\n",
				(unsigned long long)gdx_counter_get(&sq->ctr[queue_fams[k].idx]));
		}
	}
}

static void latency_family(FILE *f, struct nvmf_tgt *core)
{
	static const char name[] = "gdx_nvmf_queue_command_latency_seconds";

	family(f, name, "histogram", "from a command's arrival to its completion");
	for_each_sq(core, c, sq, q) {
		const struct nvmf_timing *tm = &sq->timing;
		uint64_t n = 0;

		for (unsigned i = 0; i <= NVMF_LAT_BUCKETS; i++) {
			n += gdx_counter_get(&tm->lat[i]);
			fprintf(f, "%s_bucket{", name);
			ctrl_labels(f, c, sq);
			if (i < NVMF_LAT_BUCKETS)
				fprintf(f, ",le=\"%g\"} %llu\n", lat_bounds_us[i] / 1e6,
					(unsigned long long)n);
			else
				fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)n);
		}
		fprintf(f, "%s_sum{", name);
		ctrl_labels(f, c, sq);
		fprintf(f, "} %.9f\n%s_count{", (double)gdx_counter_get(&tm->lat_sum_ns) / 1e9, name);
		ctrl_labels(f, c, sq);
		fprintf(f, "} %llu\n", (unsigned long long)n);
	}
}

static void status_family(FILE *f, struct nvmf_tgt *core)
{
	static const char name[] = "gdx_nvmf_queue_failed_commands_total";

	family(f, name, "counter", "commands completed with an error, by NVMe status "
	       "(SCT << 8 | SC; \"other\" past the first 15 distinct ones)");
	for_each_sq(core, c, sq, q) {
		const struct nvmf_timing *tm = &sq->timing;

		for (unsigned i = 0; i <= NVMF_STATUS_SLOTS; i++) {
			uint64_t n = gdx_counter_get(&tm->failed[i]);
			uint16_t st = i < NVMF_STATUS_SLOTS ?
					      atomic_load_explicit(&tm->status[i], memory_order_relaxed) : 0;
			char code[8];

			if (!n)
				continue;
			fprintf(f, "%s{", name);
			ctrl_labels(f, c, sq);
			snprintf(code, sizeof(code), "%#x", st);
			fputc(',', f);
			label(f, "status", st ? code : "other", true);
			label(f, "name", st ? gdx_nvme_status_str(st) : "other", false);
			fprintf(f, "} %llu\n", (unsigned long long)n);
		}
	}
}

GDX_API int gdx_nvmf_target_metrics_text(struct gdx_nvmf_target *t, FILE *f)
{
	struct nvmf_tgt *core;

	if (!t || !f)
		return -EINVAL;
	core = &t->core;
	for (size_t k = 0; k < GDX_ARRAY_SIZE(tgt_fams); k++) {
		family(f, tgt_fams[k].name, "counter", tgt_fams[k].help);
		fprintf(f, "%s %llu\n", tgt_fams[k].name,
			(unsigned long long)gdx_counter_get(&t->ctr[tgt_fams[k].idx]));
	}
	/* controllers leave the list and queues their controller under this lock */
	pthread_mutex_lock(&core->lock);
	for (size_t k = 0; k < GDX_ARRAY_SIZE(ns_fams); k++) {
		family(f, ns_fams[k].name, "counter", ns_fams[k].help);
		for (unsigned i = 0; i < core->nsubsys; i++) {
			const struct nvmf_subsys *s = core->subsys[i];

			for (unsigned n = 0; n < s->max_nsid; n++) {
				const struct nvmf_ns *ns = s->ns[n];

				if (!ns)
					continue;
				fprintf(f, "%s{", ns_fams[k].name);
				label(f, "subnqn", s->nqn, false);
				fprintf(f, ",nsid=\"%u\"} %llu\n", ns->nsid,
					(unsigned long long)gdx_counter_get(&ns->ctr[ns_fams[k].idx]));
			}
		}
	}
	for (size_t k = 0; k < GDX_ARRAY_SIZE(ctrl_fams); k++) {
		family(f, ctrl_fams[k].name, "counter", ctrl_fams[k].help);
		for (struct nvmf_ctrl *c = core->ctrls; c; c = c->next) {
			fprintf(f, "%s{", ctrl_fams[k].name);
			ctrl_labels(f, c, NULL);
			fprintf(f, "} %llu\n",
				(unsigned long long)gdx_counter_get(&c->ctr[ctrl_fams[k].idx]));
		}
	}
	queue_families(f, core);
	status_family(f, core);
	latency_family(f, core);
	pthread_mutex_unlock(&core->lock);
	return ferror(f) ? -EIO : 0;
}

/* ---- the HTTP endpoint ------------------------------------------------------------- */

#define CLIENT_MS 2000		/* to send the request, and to take the answer */
#define REQUEST_MAX 4096

struct gdx_nvmf_metrics {
	struct gdx_nvmf_target *t;
	int lfd;
	int stop[2];		/* a byte on stop[1] ends the thread */
	int port;
	pthread_t thread;
};

static void reply(int fd, const char *status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n%s\r\n", status, type, len,
			 !strncmp(status, "405", 3) ? "Allow: GET\r\n" : "");
	struct iovec v[2] = { { head, (size_t)n }, { (void *)body, len } };

	/* SO_SNDTIMEO bounds a client that does not read: a send that times out ends it */
	(void)gdx_send_full(fd, v, 2);
}

static void serve_client(struct gdx_nvmf_metrics *m, int fd)
{
	struct timeval tv = { .tv_sec = CLIENT_MS / 1000, .tv_usec = CLIENT_MS % 1000 * 1000 };
	uint64_t deadline = gdx_now_ns() + CLIENT_MS * 1000000ull;
	char req[REQUEST_MAX + 1];
	size_t got = 0;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* the whole header, or give up: a silent client costs CLIENT_MS at most */
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
				       { .fd = m->stop[0], .events = POLLIN } };
		uint64_t now = gdx_now_ns();
		ssize_t r;

		req[got] = 0;
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
		if (got == REQUEST_MAX || now >= deadline ||
		    poll(p, 2, (int)((deadline - now) / 1000000 + 1)) <= 0 || p[1].revents)
			return;
		r = recv(fd, req + got, REQUEST_MAX - got, 0);
		if (r <= 0)
			return;
		got += (size_t)r;
	}
	if (strncmp(req, "GET ", 4)) {
		reply(fd, "405 Method Not Allowed", "text/plain", "GET only\n", 9);
	} else if (strncmp(req + 4, "/metrics", 8) || !strchr(" ?", req[12])) {
		reply(fd, "404 Not Found", "text/plain", "see /metrics\n", 13);
	} else {
		char *body = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&body, &len);
		int ret = f ? gdx_nvmf_target_metrics_text(m->t, f) : -ENOMEM;

		if (f && fclose(f) && !ret)
			ret = -ENOMEM;
		if (ret)
			reply(fd, "500 Internal Server Error", "text/plain", "", 0);
		else
			reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
		free(body);
	}
}

static void *metrics_main(void *arg)
{
	struct gdx_nvmf_metrics *m = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = m->lfd, .events = POLLIN },
				       { .fd = m->stop[0], .events = POLLIN } };
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* out of descriptors: let the backlog wait rather than spin */
			if (errno == EMFILE || errno == ENFILE)
				poll(p + 1, 1, 100);
			continue;
		}
		serve_client(m, fd);
		close(fd);
	}
	return NULL;
}

GDX_API int gdx_nvmf_metrics_start(struct gdx_nvmf_target *t, const char *traddr,
				   const char *trsvcid, struct gdx_nvmf_metrics **out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct gdx_nvmf_metrics *m;
	struct addrinfo *ai;
	int one = 1, ret;

	if (!t || !traddr || !trsvcid || !out)
		return -EINVAL;
	ret = getaddrinfo(traddr, trsvcid, &hints, &ai);
	if (ret) {
		GDX_ERR("nvmf", "metrics: cannot resolve %s:%s: %s", traddr, trsvcid,
			ret == EAI_SYSTEM ? strerror(errno) : gai_strerror(ret));
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	m->t = t;
	m->stop[0] = m->stop[1] = -1;
	m->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->lfd < 0 || setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(m->lfd, ai->ai_addr, ai->ai_addrlen) || listen(m->lfd, 16) ||
	    getsockname(m->lfd, (struct sockaddr *)&ss, &sl) ||
	    pipe2(m->stop, O_CLOEXEC)) {
		ret = -errno;
		GDX_ERR("nvmf", "metrics: cannot listen on %s:%s: %s", traddr, trsvcid,
			strerror(errno));
		goto fail;
	}
	m->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
						  ((struct sockaddr_in6 *)&ss)->sin6_port);
	atomic_store(&t->core.timed, true);
	ret = -pthread_create(&m->thread, NULL, metrics_main, m);
	if (ret)
		goto fail;
	GDX_INFO("nvmf", "metrics on http://%s%s%s:%d/metrics", ai->ai_family == AF_INET6 ? "[" : "",
		 traddr, ai->ai_family == AF_INET6 ? "]" : "", m->port);
	freeaddrinfo(ai);
	*out = m;
	return 0;
fail:
	freeaddrinfo(ai);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->stop[0] >= 0) {
		close(m->stop[0]);
		close(m->stop[1]);
	}
	free(m);
	return ret;
}

GDX_API int gdx_nvmf_metrics_port(const struct gdx_nvmf_metrics *m)
{
	return m ? m->port : -EINVAL;
}

GDX_API void gdx_nvmf_metrics_stop(struct gdx_nvmf_metrics *m)
{
	if (!m)
		return;
	atomic_store(&m->t->core.timed, false);
	if (write(m->stop[1], "x", 1) != 1)
		GDX_WARN("nvmf", "metrics: cannot wake the server thread: %s", strerror(errno));
	pthread_join(m->thread, NULL);
	close(m->lfd);
	close(m->stop[0]);
	close(m->stop[1]);
	free(m);
}
