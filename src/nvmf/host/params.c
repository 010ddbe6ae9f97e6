/* SPDX-License-Identifier: MIT */
/*
 * A controller's parameters, read once on the connecting caller before
 * anything is opened: the caller's options, else the configuration; the host
 * identity; the TLS PSK and the DH-HMAC-CHAP secrets.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/config.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"

void gdx_nvmf_host_opts_init(struct gdx_nvmf_host_opts *o, size_t struct_size)
{
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
	if (struct_size >= offsetof(struct gdx_nvmf_host_opts, data_digest) + sizeof(int)) {
		o->hdr_digest = -1;
		o->data_digest = -1;
	}
}

#define OPT(o, f, def) \
	((o) && (o)->struct_size >= offsetof(struct gdx_nvmf_host_opts, f) + sizeof((o)->f) && \
	 (o)->f ? (o)->f : (def))

static void host_identity(struct nh_params *p, const char *hostnqn)
{
	char buf[256] = "";
	int fd;

	if (getrandom(p->hostid, sizeof(p->hostid), 0) != sizeof(p->hostid))
		memset(p->hostid, 0x5a, sizeof(p->hostid));
	p->hostid[6] = (uint8_t)((p->hostid[6] & 0x0f) | 0x40);
	p->hostid[8] = (uint8_t)((p->hostid[8] & 0x3f) | 0x80);
	if (hostnqn) {
		snprintf(p->hostnqn, sizeof(p->hostnqn), "%s", hostnqn);
		return;
	}
	fd = open("/etc/nvme/hostnqn", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);

		close(fd);
		if (n > 0) {
			buf[n] = 0;
			buf[strcspn(buf, " \r\n")] = 0;
		}
	}
	if (!strncmp(buf, "nqn.", 4)) {
		snprintf(p->hostnqn, sizeof(p->hostnqn), "%s", buf);
		return;
	}
	snprintf(p->hostnqn, sizeof(p->hostnqn),
		 "nqn.2014-08.org.nvmexpress:uuid:%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", p->hostid[0], p->hostid[1], p->hostid[2],
		 p->hostid[3], p->hostid[4], p->hostid[5], p->hostid[6], p->hostid[7],
		 p->hostid[8], p->hostid[9], p->hostid[10], p->hostid[11], p->hostid[12],
		 p->hostid[13], p->hostid[14], p->hostid[15]);
}

/* I/O queues default to the CPUs of the device's NUMA node (all online CPUs if unknown). */
static unsigned default_queues(struct gdx_device *dev)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct gdx_device_props props;

	if (dev && !gdx_device_props(dev, &props) && props.numa_node >= 0 &&
	    numa_available() >= 0) {
		struct bitmask *m = numa_allocate_cpumask();

		if (m && !numa_node_to_cpus(props.numa_node, m)) {
			unsigned n = numa_bitmask_weight(m);

			if (n)
				ncpu = n;
		}
		if (m)
			numa_free_cpumask(m);
	}
	return (unsigned)GDX_MAX(1L, GDX_MIN(ncpu, 8L));
}

/*
 * nvmf.host.cpus.  auto pins over RDMA only: there the receivers' CPUs decide
 * where the target's work runs on a shared machine (queue.c, nh_queue_start);
 * the TCP host's receivers have not been measured pinned.
 */
static int cpu_params(struct nh_params *p)
{
	const char *v = gdx_cfg_str("nvmf.host.cpus");
	int n;

	if (!strcmp(v, "auto")) {
		p->pin = p->rdma;
		return 0;
	}
	p->pin = strcmp(v, "none") != 0;
	if (!p->pin || !strcmp(v, "all"))
		return 0;
	n = gdx_cpus_parse(v, p->cpus, GDX_ARRAY_SIZE(p->cpus));
	if (n < 0) {
		GDX_ERR(SUB, "nvmf.host.cpus: '%s' is not auto, all, none or a CPU list", v);
		return -EINVAL;
	}
	p->ncpus = (unsigned)n;
	return 0;
}

static int auth_params(struct nh_params *p, const struct gdx_nvmf_host_opts *o)
{
	const char *key = OPT(o, dhchap_secret, NULL), *ctrl = OPT(o, dhchap_ctrl_secret, NULL);

	if (key && nvmf_auth_key_parse(key, &p->dhchap_key)) {
		GDX_ERR(SUB, "the DH-HMAC-CHAP secret is not DHHC-1:hh:<base64 key and CRC>:");
		return -EINVAL;
	}
	if (ctrl && (!key || nvmf_auth_key_parse(ctrl, &p->dhchap_ctrl_key))) {
		GDX_ERR(SUB, key ? "the controller's DH-HMAC-CHAP secret is not "
			"DHHC-1:hh:<base64 key and CRC>:" : "a controller secret needs the host's "
			"secret too (bidirectional authentication)");
		return -EINVAL;
	}
	p->has_key = key != NULL;
	p->has_ctrl_key = ctrl != NULL;
	return 0;
}

int nh_params_parse(struct nh_params *p, const char *addr, const char *svc, const char *subnqn,
		    const struct gdx_nvmf_host_opts *o)
{
	const char *tr, *tls_key;
	int hd, dd, ret;

	if (!addr || !svc || !subnqn || strlen(subnqn) >= 223 || strlen(addr) >= sizeof(p->addr) ||
	    strlen(svc) >= sizeof(p->svc))
		return -EINVAL;
	if (o && o->struct_size < offsetof(struct gdx_nvmf_host_opts, nr_io_queues))
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	snprintf(p->svc, sizeof(p->svc), "%s", svc);
	snprintf(p->subnqn, sizeof(p->subnqn), "%s", subnqn);
	host_identity(p, o ? o->hostnqn : NULL);
	p->dev = o ? o->dev : NULL;
	p->discovery = !strcmp(subnqn, GDX_NVME_DISC_NQN);
	p->nr_io_queues = OPT(o, nr_io_queues, (unsigned)gdx_cfg_int("nvmf.host.queues"));
	if (!p->nr_io_queues)
		p->nr_io_queues = default_queues(p->dev);
	p->queue_depth = OPT(o, queue_depth, (unsigned)gdx_cfg_int("nvmf.host.queue_depth"));
	p->kato_ms = OPT(o, kato_ms, (unsigned)gdx_cfg_int("nvmf.host.kato_ms"));
	p->io_timeout_ms = OPT(o, io_timeout_ms, (unsigned)gdx_cfg_int("nvmf.host.io_timeout_ms"));
	p->reconnect_delay_ms = OPT(o, reconnect_delay_ms,
				    (unsigned)gdx_cfg_int("nvmf.host.reconnect_delay_ms"));
	p->ctrl_loss_tmo_ms = OPT(o, ctrl_loss_tmo_ms,
				  (unsigned)gdx_cfg_int("nvmf.host.ctrl_loss_tmo_ms"));
	p->max_retries = OPT(o, max_retries, (unsigned)gdx_cfg_int("nvmf.host.max_retries"));
	p->connect_timeout_ms = OPT(o, connect_timeout_ms,
				    (unsigned)gdx_cfg_int("nvmf.host.connect_timeout_ms"));
	tr = OPT(o, transport, NULL);
	if (tr && strcmp(tr, "tcp") && strcmp(tr, "rdma"))
		return -EPROTONOSUPPORT;
	p->rdma = tr && !strcmp(tr, "rdma");
	ret = cpu_params(p);
	if (ret)
		return ret;
	hd = o && o->struct_size >= offsetof(struct gdx_nvmf_host_opts, hdr_digest) + sizeof(int)
		? o->hdr_digest : -1;
	dd = o && o->struct_size >= offsetof(struct gdx_nvmf_host_opts, data_digest) + sizeof(int)
		? o->data_digest : -1;
	p->hdgst = hd < 0 ? gdx_cfg_bool("nvmf.host.hdr_digest") : hd != 0;
	p->ddgst = dd < 0 ? gdx_cfg_bool("nvmf.host.data_digest") : dd != 0;
	p->max_io = gdx_cfg_size("nvmf.host.max_io");
	p->bounce_chunk = gdx_cfg_size("nvmf.host.bounce_chunk");
	p->bounce_chunks = (unsigned)gdx_cfg_int("nvmf.host.bounce_chunks");
	p->copy_poll_ns = (uint64_t)gdx_cfg_int("nvmf.host.copy_poll_us") * 1000;
	p->rdma_poll_ns = (uint64_t)gdx_cfg_int("nvmf.host.rdma_poll_us") * 1000;
	p->copy_batch = (unsigned)gdx_cfg_int("nvmf.host.copy_batch");
	p->copy_word = gdx_cfg_bool("nvmf.host.copy_word");
	p->lat_stats = gdx_cfg_bool("nvmf.host.lat_stats");
	p->post_first = gdx_cfg_bool("nvmf.host.post_first");
	p->copy_agent = (unsigned)gdx_cfg_int("nvmf.host.copy_agent");
	/* once here, not per I/O: a knob read takes the config lock and scans the environment */
	p->require_direct = gdx_cfg_bool("require_direct");
	p->sqflow_off = gdx_cfg_bool("nvmf.host.sqflow_off");
	if (p->discovery)
		p->nr_io_queues = 0;
	tls_key = OPT(o, tls_key, NULL);
	if (tls_key) {
		ret = !strncmp(tls_key, "NVMeTLSkey-", 11) ? gdx_tls_key_parse(tls_key, &p->tls_key)
							   : gdx_tls_key_load(tls_key, &p->tls_key);
		if (ret) {
			GDX_ERR(SUB, "TLS key%s%s: %s", tls_key[0] == 'N' ? "" : " file ",
				tls_key[0] == 'N' ? "" : tls_key, ret == -EBADMSG ?
				"CRC-32 does not match" : ret == -EINVAL ?
				"not in the interchange format NVMeTLSkey-1:0[012]:<base64>:" :
				strerror(-ret));
			return -EINVAL;
		}
		if (p->rdma)
			return -EINVAL;
		p->tls = true;
		p->tls_identity = OPT(o, tls_identity_v1, 0) ? 1 : 0;
	}
	return auth_params(p, o);
}
