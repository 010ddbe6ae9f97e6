/* SPDX-License-Identifier: MIT */
/* Public target API: construction, nvmetcli JSON, start/stop, statistics. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <json-c/json.h>

#include <gdx/nvmf.h>

#include "common/config.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "nvmf/target/tcp.h"
#include "nvmf/target/transport.h"

GDX_API void gdx_nvmf_target_opts_init(struct gdx_nvmf_target_opts *o, size_t size)
{
	struct gdx_nvmf_target_opts d = {
		.size = size,
		.reactors = 1,
		.max_io = 1u << 20,
		.inline_data = 16384,
		.maxh2cdata = 131072,
		.max_io_queues = 64,
		.max_qdepth = 256,
	};

	memcpy(o, &d, GDX_MIN(size, sizeof(d)));
}

/* A TCP port as a decimal string in [0, 65535]; getaddrinfo would wrap 99999. */
static bool port_ok(const char *s)
{
	if (!*s || strspn(s, "0123456789") != strlen(s))
		return false;
	return strtoul(s, NULL, 10) <= 65535;
}

GDX_API int gdx_nvmf_target_create(const struct gdx_nvmf_target_opts *uo,
				   struct gdx_nvmf_target **out)
{
	struct gdx_nvmf_target_opts o;
	struct gdx_nvmf_target *t;
	const char *sp;
	static const char *const names[] = { "connections", "connection_errors", "pdus_in",
					     "pdus_out", "connections_refused", "buffered_bytes",
					     "backpressure_holds", "stalled_queues",
					     "rdma_no_last_wqe", "staged_data_bytes" };

	gdx_nvmf_target_opts_init(&o, sizeof(o));
	if (uo)
		memcpy(&o, uo, GDX_MIN(uo->size, sizeof(o)));
	if (!o.reactors || o.reactors > 256 || o.max_io < 4096 || o.max_io > (16u << 20) ||
	    o.inline_data > (1u << 20) || o.maxh2cdata < 4096 || o.maxh2cdata % 4 ||
	    !o.max_io_queues || o.max_io_queues > NVMF_MAX_IO_QUEUES || o.max_qdepth < 32 ||
	    o.max_qdepth > 256 || o.poll_us > 1000000)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (o.cpus) {
		int n = gdx_cpus_parse(o.cpus, t->cpus, GDX_ARRAY_SIZE(t->cpus));

		if (n < 0) {
			GDX_ERR("nvmf", "bad CPU list '%s'", o.cpus);
			free(t);
			return -EINVAL;
		}
		t->ncpus = (unsigned)n;
	}
	nvmf_tgt_init(&t->core);
	pthread_mutex_init(&t->reactors_lock, NULL);
	t->core.max_io = o.max_io;
	t->core.inline_data = o.inline_data;
	t->core.max_io_queues = o.max_io_queues;
	t->core.max_qdepth = o.max_qdepth;
	t->nreactors = o.reactors;
	t->maxh2cdata = o.maxh2cdata;
	t->poll_ns = (uint64_t)o.poll_us * 1000;
	t->pin = o.pin_cpus != 0;
	t->follow = o.follow != 0;
	for (unsigned i = 0; i < TGT_CTR_NR; i++)
		t->ctr[i].name = names[i];
	gdx_stats_create("nvmf.target", t->ctr, TGT_CTR_NR, &t->stats);
	t->lat_stats = gdx_cfg_bool("nvmf.target.lat_stats");
	t->max_conns = (unsigned)gdx_cfg_int("nvmf.target.max_conns");
	t->handshake_ns = (uint64_t)gdx_cfg_int("nvmf.target.handshake_timeout_ms") * 1000000;
	t->conn_buf_max = gdx_cfg_size("nvmf.target.conn_buf_max");
	t->buf_max = gdx_cfg_size("nvmf.target.buf_max");
	t->stall_ns = (uint64_t)gdx_cfg_int("nvmf.target.stall_timeout_ms") * 1000000;
	t->rdma_srq = (unsigned)gdx_cfg_int("nvmf.target.rdma_srq");
	t->core.auth_tmo_ns = (uint64_t)gdx_cfg_int("nvmf.target.auth_timeout_ms") * 1000000;
	sp = gdx_cfg_str("nvmf.target.splice");
	t->splice = !strcmp(sp, "on") ? TGT_SPLICE_ON : !strcmp(sp, "off") ? TGT_SPLICE_OFF :
									TGT_SPLICE_AUTO;
	*out = t;
	return 0;
}

GDX_API void gdx_nvmf_target_destroy(struct gdx_nvmf_target *t)
{
	if (!t)
		return;
	gdx_nvmf_target_stop(t);
	nvmf_tgt_fini(&t->core);
	gdx_stats_destroy(t->stats);
	pthread_mutex_destroy(&t->reactors_lock);
	free(t);
}

GDX_API int gdx_nvmf_target_add_subsys(struct gdx_nvmf_target *t, const char *nqn,
				       int allow_any_host)
{
	struct nvmf_subsys *s;
	int ret = nvmf_subsys_add(&t->core, nqn, &s);

	if (!ret)
		s->allow_any_host = allow_any_host;
	return ret;
}

GDX_API int gdx_nvmf_target_allow_host(struct gdx_nvmf_target *t, const char *nqn,
				       const char *hostnqn)
{
	struct nvmf_subsys *s = nvmf_subsys_find(&t->core, nqn);

	if (!s || s->discovery)
		return -ENOENT;
	return nvmf_subsys_add_host(s, hostnqn);
}

GDX_API int gdx_nvmf_target_set_host_auth(struct gdx_nvmf_target *t, const char *hostnqn,
					  const char *key, const char *ctrl_key,
					  const char *hashes, const char *dhgroups)
{
	struct nvmf_host_auth a;
	int n, ret = -EINVAL;

	memset(&a, 0, sizeof(a));
	if (!hostnqn || !key || strlen(hostnqn) >= sizeof(a.nqn))
		return -EINVAL;
	snprintf(a.nqn, sizeof(a.nqn), "%s", hostnqn);
	if (nvmf_auth_key_parse(key, &a.key)) {
		GDX_ERR("nvmf", "host %s: the DH-HMAC-CHAP key is not DHHC-1:hh:<base64 key and "
			"CRC>:", hostnqn);
		goto out;
	}
	if (ctrl_key && nvmf_auth_key_parse(ctrl_key, &a.ctrl_key)) {
		GDX_ERR("nvmf", "host %s: the DH-HMAC-CHAP controller key is not DHHC-1:hh:"
			"<base64 key and CRC>:", hostnqn);
		goto out;
	}
	a.has_ctrl_key = ctrl_key != NULL;
	n = nvmf_auth_hash_list(hashes ? hashes : "sha256,sha384,sha512", a.hashes,
				NVMF_AUTH_NHASH);
	if (n < 0) {
		GDX_ERR("nvmf", "host %s: dhchap_hash '%s' is not a list of hmac(sha256), "
			"hmac(sha384), hmac(sha512)", hostnqn, hashes);
		goto out;
	}
	a.nhash = (unsigned)n;
	n = nvmf_auth_dh_list(dhgroups ? dhgroups :
			      "null,ffdhe2048,ffdhe3072,ffdhe4096,ffdhe6144,ffdhe8192",
			      a.dhs, NVMF_AUTH_NDH);
	if (n < 0) {
		GDX_ERR("nvmf", "host %s: dhchap_dhgroup '%s' is not a list of null, ffdhe2048, "
			"ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192", hostnqn, dhgroups);
		goto out;
	}
	a.ndh = (unsigned)n;
	ret = nvmf_tgt_set_host_auth(&t->core, &a);
out:
	nvmf_auth_wipe(&a, sizeof(a));
	return ret;
}

/*
 * ram:SIZE and null:SIZE must be whole blocks: "ram:1000" would otherwise
 * become one 512-byte block and "ram:1X" fail without saying why.
 */
static int mem_spec_check(const char *spec, uint32_t block_size)
{
	const char *colon = strchr(spec, ':');
	uint64_t size;

	if (strncmp(spec, "ram:", 4) && strncmp(spec, "null:", 5))
		return 0;
	if (gdx_parse_size(colon + 1, &size) || !size) {
		GDX_ERR("nvmf", "namespace '%s': '%s' is not a size (a number above 0, optionally "
			"with k, M, G or T)", spec, colon + 1);
		return -EINVAL;
	}
	if (size % block_size) {
		GDX_ERR("nvmf", "namespace '%s': %llu bytes is not a multiple of the block size "
			"(%u)", spec, (unsigned long long)size, block_size);
		return -EINVAL;
	}
	return 0;
}

GDX_API int gdx_nvmf_target_add_ns(struct gdx_nvmf_target *t, const char *nqn, uint32_t nsid,
				   const char *spec, uint32_t block_size)
{
	struct nvmf_subsys *s = nvmf_subsys_find(&t->core, nqn);
	int ret;

	if (!s || s->discovery)
		return -ENOENT;
	if ((ret = mem_spec_check(spec, block_size ? block_size : 512)))
		return ret;
	if (!nsid) {
		nsid = 1;
		while (nsid <= NVMF_MAX_NS && s->ns[nsid - 1])
			nsid++;
	}
	return nvmf_subsys_add_ns(&t->core, s, nsid, spec, block_size ? block_size : 512, NULL,
				  NULL);
}

GDX_API int gdx_nvmf_target_add_port_tr(struct gdx_nvmf_target *t, uint16_t portid,
					const char *trtype, const char *traddr,
					const char *trsvcid)
{
	const struct nvmf_transport_ops *tr = nvmf_transport_find(trtype ? trtype : "tcp");
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	char numeric[INET6_ADDRSTRLEN];
	struct addrinfo *ai;
	struct nvmf_port *p;
	int ret;

	if (!tr)
		return -EPROTONOSUPPORT;
	if (t->running)
		return -EBUSY;
	if (!port_ok(trsvcid)) {
		GDX_ERR("nvmf", "port %u: '%s' is not a port number (0-65535)", portid, trsvcid);
		return -EINVAL;
	}
	/*
	 * The discovery log hands traddr to hosts, which want an address: a
	 * name ("localhost") is listened on, and reported, as what it resolves to.
	 */
	ret = getaddrinfo(traddr, trsvcid, &hints, &ai);
	if (ret) {
		GDX_ERR("nvmf", "port %u: cannot resolve '%s': %s", portid, traddr,
			ret == EAI_SYSTEM ? strerror(errno) : gai_strerror(ret));
		return -EINVAL;
	}
	ret = getnameinfo(ai->ai_addr, ai->ai_addrlen, numeric, sizeof(numeric), NULL, 0,
			  NI_NUMERICHOST);
	freeaddrinfo(ai);
	if (ret)
		return -EINVAL;
	if (strcmp(numeric, traddr))
		GDX_INFO("nvmf", "port %u: %s is %s", portid, traddr, numeric);
	return nvmf_port_add(&t->core, portid, tr->trtype, numeric, trsvcid, &p);
}

GDX_API int gdx_nvmf_target_add_port(struct gdx_nvmf_target *t, uint16_t portid,
				     const char *traddr, const char *trsvcid)
{
	return gdx_nvmf_target_add_port_tr(t, portid, "tcp", traddr, trsvcid);
}

GDX_API int gdx_nvmf_target_link(struct gdx_nvmf_target *t, uint16_t portid, const char *nqn)
{
	struct nvmf_port *p = nvmf_port_find(&t->core, portid);
	struct nvmf_subsys *s = nvmf_subsys_find(&t->core, nqn);

	if (!p || !s || s->discovery)
		return -ENOENT;
	return nvmf_port_link(&t->core, p, s);
}

/* A TLS key given as the key or as a file of it; what is wrong said without the key. */
static int tls_key_read(const char *what, const char *key, struct gdx_tls_key *k)
{
	bool inline_key = !strncmp(key, "NVMeTLSkey-", 11);
	int ret = inline_key ? gdx_tls_key_parse(key, k) : gdx_tls_key_load(key, k);

	if (ret)
		GDX_ERR("nvmf", "%s: TLS key%s%s: %s", what, inline_key ? "" : " file ",
			inline_key ? "" : key, ret == -EBADMSG ? "CRC-32 does not match" :
			ret == -EINVAL ? "not in the interchange format NVMeTLSkey-1:0[012]:<base64>:" :
			strerror(-ret));
	return ret;
}

GDX_API int gdx_nvmf_target_set_host_tls_key(struct gdx_nvmf_target *t, const char *hostnqn,
					     const char *key)
{
	struct gdx_tls_key k;
	char what[GDX_NVME_NQN_SIZE + 8];
	int ret;

	if (!hostnqn || !key)
		return -EINVAL;
	snprintf(what, sizeof(what), "host %s", hostnqn);
	ret = tls_key_read(what, key, &k);
	if (!ret)
		ret = nvmf_tgt_set_host_psk(&t->core, hostnqn, &k);
	gdx_tls_wipe(&k, sizeof(k));
	return ret;
}

GDX_API int gdx_nvmf_target_port_tls(struct gdx_nvmf_target *t, uint16_t portid, const char *key,
				     int required)
{
	struct nvmf_port *p = nvmf_port_find(&t->core, portid);
	char what[16];
	int ret;

	if (!p)
		return -ENOENT;
	if (p->trtype != GDX_NVMF_TRTYPE_TCP)
		return -EINVAL;
	snprintf(what, sizeof(what), "port %u", portid);
	if (key && (ret = tls_key_read(what, key, &p->tls_key)))
		return ret;
	p->sectype = GDX_NVMF_TCP_SECTYPE_TLS13;
	p->treq = required ? GDX_NVMF_TREQ_REQUIRED : GDX_NVMF_TREQ_NOT_REQUIRED;
	return 0;
}

int nvmf_target_reactor_cpu(const struct gdx_nvmf_target *t, unsigned i)
{
	if (!t->ncpus && !t->pin)
		return -1;
	return gdx_cpus_pick(t->cpus, t->ncpus, i);
}

bool nvmf_log_limit_ok(struct nvmf_log_limit *l, uint64_t now, uint64_t *held)
{
	if (now < l->next_ns) {
		l->held++;
		return false;
	}
	*held = l->held;
	l->held = 0;
	l->next_ns = now + 1000000000ull;
	return true;
}

void nvmf_bufs_init(struct nvmf_bufs *b, struct gdx_nvmf_target *t, const struct nvmf_sq *sq,
		    const char *peer)
{
	b->tgt = t;
	b->bytes = 0;
	b->wait_head = NULL;
	b->wait_tail = &b->wait_head;
	b->sq = sq;
	b->peer = peer;
}

void nvmf_bufs_account(struct nvmf_bufs *b, uint32_t freed, uint32_t got)
{
	b->bytes = b->bytes - freed + got;
	/* the counter wraps back for a release */
	gdx_counter_add(&b->tgt->ctr[TGT_CTR_BUF_BYTES], (uint64_t)got - freed);
}

void nvmf_bufs_wait(struct nvmf_bufs *b, struct nvmf_buf_wait *w, struct nvmf_log_limit *log)
{
	uint64_t held;

	w->next = NULL;
	*b->wait_tail = w;
	b->wait_tail = &w->next;
	if (b->wait_head != w)
		return;
	gdx_counter_add(&b->tgt->ctr[TGT_CTR_HOLDS], 1);
	if (log && nvmf_log_limit_ok(log, gdx_now_ns(), &held))
		GDX_WARN("nvmf", "%s qid %u: holds %" PRIu64 " bytes of request buffers, the target %"
			 PRIu64 " (limits nvmf.target.conn_buf_max %" PRIu64 ", buf_max %" PRIu64
			 "): its commands wait for buffers (%" PRIu64 " more)", b->peer, b->sq->qid,
			 b->bytes, gdx_counter_get(&b->tgt->ctr[TGT_CTR_BUF_BYTES]),
			 b->tgt->conn_buf_max, b->tgt->buf_max, held);
}

struct nvmf_buf_wait *nvmf_bufs_pop(struct nvmf_bufs *b)
{
	struct nvmf_buf_wait *w = b->wait_head;

	if (!w)
		return NULL;
	b->wait_head = w->next;
	if (!b->wait_head)
		b->wait_tail = &b->wait_head;
	return w;
}

unsigned nvmf_target_nports(const struct gdx_nvmf_target *t, uint8_t trtype)
{
	unsigned n = 0;

	for (unsigned i = 0; i < t->core.nports; i++)
		n += t->core.ports[i].trtype == trtype;
	return n;
}

void nvmf_target_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t n)
{
	char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";

	if (sa)
		getnameinfo(sa, len, host, sizeof(host), port, sizeof(port),
			    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(out, n, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

void nvmf_target_sq_stats(struct nvmf_sq *sq, struct gdx_stats **st)
{
	char scope[64];

	if (*st || !sq->ctrl)
		return;
	snprintf(scope, sizeof(scope), "nvmf.queue.%u.%u", sq->ctrl->cntlid, sq->qid);
	gdx_stats_create(scope, sq->ctr, GDX_ARRAY_SIZE(sq->ctr), st);
}

static const struct nvmf_transport_ops *const transports[] = { &nvmf_tcp_ops, &nvmf_rdma_ops };

const struct nvmf_transport_ops *nvmf_transport_find(const char *name)
{
	for (size_t i = 0; i < GDX_ARRAY_SIZE(transports); i++)
		if (!strcmp(transports[i]->name, name))
			return transports[i];
	return NULL;
}

GDX_API int gdx_nvmf_target_start(struct gdx_nvmf_target *t)
{
	size_t i;
	int ret = 0;

	if (t->running)
		return -EBUSY;
	if (!t->core.nports)
		return -EINVAL;
	for (i = 0; i < GDX_ARRAY_SIZE(transports) && !ret; i++)
		ret = transports[i]->start(t);
	if (ret) {
		while (i--)
			transports[i]->stop(t);
		return ret;
	}
	t->running = true;
	return 0;
}

GDX_API void gdx_nvmf_target_stop(struct gdx_nvmf_target *t)
{
	if (!t->running)
		return;
	for (size_t i = GDX_ARRAY_SIZE(transports); i--;)
		transports[i]->stop(t);
	t->running = false;
}

GDX_API int gdx_nvmf_target_bound_port(struct gdx_nvmf_target *t, uint16_t portid)
{
	for (unsigned i = 0; i < t->core.nports; i++)
		if (t->core.ports[i].portid == portid)
			return t->running ? t->bound_port[i] : -ENOENT;
	return -ENOENT;
}

static double lat_ratio(uint64_t num, uint64_t den, double scale)
{
	return den ? (double)num / (double)den * scale : 0.0;
}

/*
 * The sums (to difference between two dumps) and what they mean since the
 * start: per-read stage means in us, capsules per wake-up, shares of the
 * reactors' time.
 */
static json_object *lat_json(struct gdx_nvmf_target *t)
{
	static const char *const names[TGT_LAT_NR] = {
		"reads", "pickup_ns", "ns_ns", "send_ns", "wakes", "wake_cmds",
		"sleeps", "sleep_ns", "poll_ns", "busy_ns",
	};
	json_object *o = json_object_new_object();
	uint64_t v[TGT_LAT_NR], all;

	if (!o)
		return NULL;
	nvmf_tcp_lat_sum(t, v);
	all = v[TGT_LAT_SLEEP_NS] + v[TGT_LAT_POLL_NS] + v[TGT_LAT_BUSY_NS];
	for (unsigned i = 0; i < TGT_LAT_NR; i++)
		json_object_object_add(o, names[i], json_object_new_uint64(v[i]));
	json_object_object_add(o, "lat_pickup_us",
			       json_object_new_double(lat_ratio(v[TGT_LAT_PICKUP_NS],
								v[TGT_LAT_READS], 1e-3)));
	json_object_object_add(o, "lat_ns_us",
			       json_object_new_double(lat_ratio(v[TGT_LAT_NS_NS],
								v[TGT_LAT_READS], 1e-3)));
	json_object_object_add(o, "lat_send_us",
			       json_object_new_double(lat_ratio(v[TGT_LAT_SEND_NS],
								v[TGT_LAT_READS], 1e-3)));
	json_object_object_add(o, "lat_total_us",
			       json_object_new_double(lat_ratio(v[TGT_LAT_PICKUP_NS] +
									v[TGT_LAT_NS_NS] +
									v[TGT_LAT_SEND_NS],
								v[TGT_LAT_READS], 1e-3)));
	json_object_object_add(o, "lat_cmds_per_wake",
			       json_object_new_double(lat_ratio(v[TGT_LAT_WAKE_CMDS],
								v[TGT_LAT_WAKES], 1)));
	json_object_object_add(o, "lat_sleep_us",
			       json_object_new_double(lat_ratio(v[TGT_LAT_SLEEP_NS],
								v[TGT_LAT_SLEEPS], 1e-3)));
	json_object_object_add(o, "lat_sleep_pct",
			       json_object_new_double(lat_ratio(v[TGT_LAT_SLEEP_NS], all, 100)));
	json_object_object_add(o, "lat_poll_pct",
			       json_object_new_double(lat_ratio(v[TGT_LAT_POLL_NS], all, 100)));
	json_object_object_add(o, "lat_busy_pct",
			       json_object_new_double(lat_ratio(v[TGT_LAT_BUSY_NS], all, 100)));
	return o;
}

/* The registered counters, with this target's latency sums as "nvmf.target.lat". */
GDX_API int gdx_nvmf_target_stats_json(struct gdx_nvmf_target *t, FILE *f)
{
	json_object *root, *lat;
	const char *out;
	int ret;

	if (!t || !f)
		return -EINVAL;
	root = gdx_stats_json();
	if (!root)
		return -ENOMEM;
	lat = lat_json(t);
	if (!lat || json_object_object_add(root, "nvmf.target.lat", lat)) {
		json_object_put(lat);
		json_object_put(root);
		return -ENOMEM;
	}
	out = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
						   JSON_C_TO_STRING_NOSLASHESCAPE);
	ret = !out ? -ENOMEM : fputs(out, f) == EOF || fputc('\n', f) == EOF || fflush(f) ? -EIO : 0;
	json_object_put(root);
	return ret;
}

/* ---- nvmetcli JSON ------------------------------------------------------------ */

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return json_object_get_string(v);
}

/* nvmetcli writes attributes as strings ("1"); accept numbers and booleans too. */
static bool jtrue(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v))
		return false;
	if (json_object_is_type(v, json_type_string))
		return !strcmp(json_object_get_string(v), "1") ||
		       !strcmp(json_object_get_string(v), "true");
	return json_object_get_int(v) != 0;
}

static int parse_hex_id(const char *s, uint8_t *out, size_t n)
{
	size_t k = 0;

	for (; *s && k < 2 * n; s++) {
		int v;

		if (*s == '-')
			continue;
		if (*s >= '0' && *s <= '9')
			v = *s - '0';
		else if (*s >= 'a' && *s <= 'f')
			v = *s - 'a' + 10;
		else if (*s >= 'A' && *s <= 'F')
			v = *s - 'A' + 10;
		else
			return -EINVAL;
		if (k % 2 == 0)
			out[k / 2] = (uint8_t)(v << 4);
		else
			out[k / 2] |= (uint8_t)v;
		k++;
	}
	return k == 2 * n && !*s ? 0 : -EINVAL;
}

/*
 * nvmetcli refuses attributes it does not know, and so does this loader: a
 * typo ("trsvcdi") must not leave the target on another port.  Keys that
 * nvmetcli writes but gdx does not act on (cntlid_min, ana_groups, ...) are
 * accepted so that its files load as they are.  where: "ports[0].addr".
 */
static int known_keys(struct json_object *o, const char *path, const char *where,
		      const char *const *keys)
{
	if (!o)
		return 0;
	if (!json_object_is_type(o, json_type_object)) {
		GDX_ERR("nvmf", "config %s: %s is not an object", path, where);
		return GDX_ECONFIG;
	}
	json_object_object_foreach(o, key, val) {
		const char *const *k = keys;

		(void)val;
		while (*k && strcmp(*k, key))
			k++;
		if (!*k) {
			GDX_ERR("nvmf", "config %s: unknown key '%s' in %s", path, key, where);
			return GDX_ECONFIG;
		}
	}
	return 0;
}

/* An array member: absent is empty, anything but an array is an error. */
static int jarray(struct json_object *o, const char *key, const char *path, const char *where,
		  struct json_object **arr)
{
	*arr = NULL;
	if (!json_object_object_get_ex(o, key, arr))
		return 0;
	if (json_object_is_type(*arr, json_type_array))
		return 0;
	GDX_ERR("nvmf", "config %s: '%s' in %s is not an array", path, key, where);
	return GDX_ECONFIG;
}

static int load_ns(struct gdx_nvmf_target *t, struct nvmf_subsys *s, struct json_object *jn,
		   const char *cfg, const char *where)
{
	static const char *const ns_keys[] = { "nsid", "enable", "device", "ana_grpid", "ana",
					       "buffered_io", "p2pmem", "resv_enable",
					       "block_size", NULL };
	static const char *const dev_keys[] = { "path", "nguid", "uuid", NULL };
	struct json_object *dev = NULL, *v;
	uint8_t nguid[16], uuid[16];
	bool has_nguid = false, has_uuid = false;
	uint32_t nsid = 0, bs = 512;
	const char *path, *id;
	char in[160];
	int ret;

	snprintf(in, sizeof(in), "%s.device", where);
	json_object_object_get_ex(jn, "device", &dev);
	if ((ret = known_keys(jn, cfg, where, ns_keys)) || (ret = known_keys(dev, cfg, in, dev_keys)))
		return ret;
	if (json_object_object_get_ex(jn, "nsid", &v))
		nsid = (uint32_t)json_object_get_int(v);
	path = jstr(dev, "path");
	if (!nsid || !path) {
		GDX_ERR("nvmf", "config: %s: namespace needs nsid and device.path", s->nqn);
		return GDX_ECONFIG;
	}
	if (json_object_object_get_ex(jn, "enable", &v) && !json_object_get_int(v)) {
		GDX_INFO("nvmf", "config: %s: namespace %u disabled, skipped", s->nqn, nsid);
		return 0;
	}
	if (json_object_object_get_ex(jn, "block_size", &v)) {
		bs = (uint32_t)json_object_get_int(v);
		if (bs != 512 && bs != 4096) {
			GDX_ERR("nvmf", "config %s: %s.block_size is %s, not 512 or 4096", cfg, where,
				json_object_get_string(v));
			return GDX_ECONFIG;
		}
	}
	if (mem_spec_check(path, bs))
		return GDX_ECONFIG;
	id = jstr(dev, "nguid");
	if (id && *id && strspn(id, "0-") != strlen(id)) {
		if (parse_hex_id(id, nguid, 16))
			return GDX_ECONFIG;
		has_nguid = true;
	}
	id = jstr(dev, "uuid");
	if (id && *id) {
		if (parse_hex_id(id, uuid, 16))
			return GDX_ECONFIG;
		has_uuid = true;
	}
	return nvmf_subsys_add_ns(&t->core, s, nsid, path, bs, has_nguid ? nguid : NULL,
				  has_uuid ? uuid : NULL);
}

static int load_subsys(struct gdx_nvmf_target *t, struct json_object *js, const char *cfg,
		       size_t idx)
{
	static const char *const subsys_keys[] = { "nqn", "attr", "allowed_hosts", "namespaces",
						   "attr_allow_any_host", NULL };
	static const char *const attr_keys[] = { "allow_any_host", "cntlid_min", "cntlid_max",
						 "firmware", "ieee_oui", "model", "pi_enable",
						 "qid_max", "serial", "version", NULL };
	struct json_object *attr = NULL, *arr, *v;
	struct nvmf_subsys *s;
	const char *nqn = jstr(js, "nqn"), *x;
	char where[48], in[96];
	int ret;

	snprintf(where, sizeof(where), "subsystems[%zu]", idx);
	snprintf(in, sizeof(in), "%s.attr", where);
	json_object_object_get_ex(js, "attr", &attr);
	if ((ret = known_keys(js, cfg, where, subsys_keys)) ||
	    (ret = known_keys(attr, cfg, in, attr_keys)))
		return ret;
	if (!nqn) {
		GDX_ERR("nvmf", "config %s: %s has no nqn", cfg, where);
		return GDX_ECONFIG;
	}
	ret = nvmf_subsys_add(&t->core, nqn, &s);
	if (ret) {
		GDX_ERR("nvmf", "config: subsystem '%s': %s", nqn, gdx_strerror(ret));
		return ret;
	}
	s->allow_any_host = jtrue(attr, "allow_any_host") || jtrue(js, "attr_allow_any_host");
	if ((x = jstr(attr, "serial")) && *x)
		snprintf(s->serial, sizeof(s->serial), "%s", x);
	if ((x = jstr(attr, "model")) && *x)
		snprintf(s->model, sizeof(s->model), "%s", x);
	if ((ret = jarray(js, "allowed_hosts", cfg, where, &arr)))
		return ret;
	if (arr)
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			v = json_object_array_get_idx(arr, i);
			ret = nvmf_subsys_add_host(s, json_object_get_string(v));
			if (ret)
				return ret;
		}
	if ((ret = jarray(js, "namespaces", cfg, where, &arr)))
		return ret;
	if (arr)
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			snprintf(in, sizeof(in), "%s.namespaces[%zu]", where, i);
			ret = load_ns(t, s, json_object_array_get_idx(arr, i), cfg, in);
			if (ret)
				return ret;
		}
	return 0;
}

static int load_port(struct gdx_nvmf_target *t, struct json_object *jp, const char *cfg,
		     size_t idx)
{
	static const char *const port_keys[] = { "portid", "addr", "subsystems", "referrals",
						 "ana_groups", "param", "tls_key", NULL };
	static const char *const addr_keys[] = { "trtype", "adrfam", "traddr", "trsvcid", "treq",
						 "tsas", NULL };
	static const char *const param_keys[] = { "inline_data_size", "pi_enable",
						  "max_queue_size", NULL };
	struct json_object *addr = NULL, *param = NULL, *arr, *v;
	const char *trtype, *traddr, *trsvcid, *treq, *tsas, *tls_key;
	const struct nvmf_transport_ops *tr;
	struct nvmf_port *p;
	uint16_t portid = 0;
	char where[48], in[64], in2[64];
	int ret;

	snprintf(where, sizeof(where), "ports[%zu]", idx);
	snprintf(in, sizeof(in), "%s.addr", where);
	snprintf(in2, sizeof(in2), "%s.param", where);
	json_object_object_get_ex(jp, "addr", &addr);
	json_object_object_get_ex(jp, "param", &param);
	if ((ret = known_keys(jp, cfg, where, port_keys)) ||
	    (ret = known_keys(addr, cfg, in, addr_keys)) ||
	    (ret = known_keys(param, cfg, in2, param_keys)))
		return ret;
	if (json_object_object_get_ex(jp, "portid", &v)) {
		int id = json_object_get_int(v);

		if (id < 0 || id > 65535) {
			GDX_ERR("nvmf", "config %s: %s.portid %d is not in 0-65535", cfg, where, id);
			return GDX_ECONFIG;
		}
		portid = (uint16_t)id;
	}
	trtype = jstr(addr, "trtype");
	traddr = jstr(addr, "traddr");
	trsvcid = jstr(addr, "trsvcid");
	tr = nvmf_transport_find(trtype ? trtype : "tcp");
	if (!tr) {
		GDX_WARN("nvmf", "config: port %u: transport '%s' is not served, skipped", portid,
			 trtype);
		return 0;
	}
	if (!traddr || !*traddr)
		traddr = "0.0.0.0";
	if (!trsvcid || !*trsvcid)
		trsvcid = "4420";
	if (!port_ok(trsvcid)) {
		GDX_ERR("nvmf", "config %s: %s.addr.trsvcid '%s' is not a port number (0-65535)",
			cfg, where, trsvcid);
		return GDX_ECONFIG;
	}
	ret = nvmf_port_add(&t->core, portid, tr->trtype, traddr, trsvcid, &p);
	if (ret) {
		GDX_ERR("nvmf", "config: port %u: %s", portid, gdx_strerror(ret));
		return ret;
	}
	/* configfs's values: addr_tsas "none" | "tls1.3", addr_treq "not specified" | "required" |
	 * "not required"; the PSK (gdx's own key: configfs takes it from the keyring) */
	treq = jstr(addr, "treq");
	tsas = jstr(addr, "tsas");
	tls_key = jstr(jp, "tls_key");
	if (tsas && strcmp(tsas, "none") && strcmp(tsas, "tls1.3")) {
		GDX_ERR("nvmf", "config %s: %s.addr.tsas '%s' is not none or tls1.3", cfg, where, tsas);
		return GDX_ECONFIG;
	}
	if (treq && strcmp(treq, "not specified") && strcmp(treq, "required") &&
	    strcmp(treq, "not required")) {
		GDX_ERR("nvmf", "config %s: %s.addr.treq '%s' is not 'not specified', 'required' or "
			"'not required'", cfg, where, treq);
		return GDX_ECONFIG;
	}
	if (tsas && !strcmp(tsas, "tls1.3")) {
		/* without a port key only hosts with their own (host entries' tls_key) get in */
		if ((!tls_key && !t->core.nhpsk) || tr->trtype != GDX_NVMF_TRTYPE_TCP) {
			GDX_ERR("nvmf", "config %s: %s has tsas tls1.3 but %s", cfg, where,
				tr->trtype != GDX_NVMF_TRTYPE_TCP ? "is not a TCP port" :
				"no tls_key (a key or a key file), and no host has one");
			return GDX_ECONFIG;
		}
		ret = gdx_nvmf_target_port_tls(t, portid, tls_key, !treq || strcmp(treq, "not required"));
		if (ret)
			return GDX_ECONFIG;
	} else if (tls_key || (treq && !strcmp(treq, "required"))) {
		GDX_ERR("nvmf", "config %s: %s has %s without tsas tls1.3", cfg, where,
			tls_key ? "tls_key" : "treq required");
		return GDX_ECONFIG;
	}
	if ((ret = jarray(jp, "subsystems", cfg, where, &arr)))
		return ret;
	if (arr)
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			const char *nqn = json_object_get_string(json_object_array_get_idx(arr, i));
			struct nvmf_subsys *s = nqn ? nvmf_subsys_find(&t->core, nqn) : NULL;

			if (!s) {
				GDX_ERR("nvmf", "config: port %u names unknown subsystem '%s'",
					portid, nqn ? nqn : "");
				return GDX_ECONFIG;
			}
			ret = nvmf_port_link(&t->core, p, s);
			if (ret)
				return ret;
		}
	return 0;
}

/*
 * A host entry: its DH-HMAC-CHAP settings under configfs's names (nvmetcli
 * writes "" for unset), and its own TLS PSK, tls_key (configfs has none: nvmet
 * finds it in the keyring), the name nvme-cli's config.json gives it.
 */
static int load_host(struct gdx_nvmf_target *t, struct json_object *jh, const char *cfg,
		     const char *where)
{
	const char *nqn = jstr(jh, "nqn"), *key = jstr(jh, "dhchap_key");
	const char *ctrl = jstr(jh, "dhchap_ctrl_key"), *hash = jstr(jh, "dhchap_hash");
	const char *dh = jstr(jh, "dhchap_dhgroup"), *tls_key = jstr(jh, "tls_key");
	int ret;

	if ((!key || !*key) && ((ctrl && *ctrl) || (hash && *hash) || (dh && *dh))) {
		GDX_ERR("nvmf", "config %s: %s has dhchap settings but no dhchap_key", cfg, where);
		return GDX_ECONFIG;
	}
	if ((!key || !*key) && (!tls_key || !*tls_key))
		return 0;
	if (!nqn) {
		GDX_ERR("nvmf", "config %s: %s has no nqn", cfg, where);
		return GDX_ECONFIG;
	}
	if (key && *key) {
		ret = gdx_nvmf_target_set_host_auth(t, nqn, key, ctrl && *ctrl ? ctrl : NULL,
						    hash && *hash ? hash : NULL,
						    dh && *dh ? dh : NULL);
		if (ret) {
			GDX_ERR("nvmf", "config %s: %s: its dhchap settings are not valid", cfg,
				where);
			return GDX_ECONFIG;
		}
	}
	if (tls_key && *tls_key && gdx_nvmf_target_set_host_tls_key(t, nqn, tls_key)) {
		GDX_ERR("nvmf", "config %s: %s: its tls_key is not valid", cfg, where);
		return GDX_ECONFIG;
	}
	return 0;
}

GDX_API int gdx_nvmf_target_load_json(struct gdx_nvmf_target *t, const char *path)
{
	static const char *const root_keys[] = { "hosts", "ports", "subsystems", NULL };
	static const char *const host_keys[] = { "nqn", "dhchap_key", "dhchap_ctrl_key",
						 "dhchap_hash", "dhchap_dhgroup", "tls_key", NULL };
	struct json_object *root = json_object_from_file(path), *arr = NULL;
	int ret = 0;

	if (!root) {
		GDX_ERR("nvmf", "config %s: %s", path, json_util_get_last_err());
		return GDX_ECONFIG;
	}
	ret = known_keys(root, path, "the top level", root_keys);
	if (!ret)
		ret = jarray(root, "hosts", path, "the top level", &arr);
	for (size_t i = 0; !ret && arr && i < json_object_array_length(arr); i++) {
		char where[32];

		snprintf(where, sizeof(where), "hosts[%zu]", i);
		ret = known_keys(json_object_array_get_idx(arr, i), path, where, host_keys);
		if (!ret)
			ret = load_host(t, json_object_array_get_idx(arr, i), path, where);
	}
	/* subsystems first: ports refer to them by NQN */
	if (!ret)
		ret = jarray(root, "subsystems", path, "the top level", &arr);
	for (size_t i = 0; !ret && arr && i < json_object_array_length(arr); i++)
		ret = load_subsys(t, json_object_array_get_idx(arr, i), path, i);
	if (!ret)
		ret = jarray(root, "ports", path, "the top level", &arr);
	for (size_t i = 0; !ret && arr && i < json_object_array_length(arr); i++)
		ret = load_port(t, json_object_array_get_idx(arr, i), path, i);
	json_object_put(root);
	return ret;
}
