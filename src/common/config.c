/* SPDX-License-Identifier: MIT */
/*
 * The one table of knobs.  Each has a dotted name; its environment variable is
 * GDX_ plus the name upper-cased with dots as underscores, and its JSON key
 * path is the name split at the dots.  docs/config.md is checked against this
 * table by tests/unit/test_config.c.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"

enum knob_type { K_INT, K_SIZE, K_BOOL, K_STRING, K_ENUM };

struct knob {
	const char *name;
	enum knob_type type;
	const char *def;
	const char *doc;
	const char *choices;	/* K_ENUM, K_STRING: "a|b|c" (a string: each with ":N" too) */
	int64_t min, max;	/* K_INT / K_SIZE bounds (inclusive) */
	/* run-time state */
	char *set_val;		/* gdx_config_set */
	char *file_val;		/* JSON file */
	char env[64];
	int warned;
};

#define KNOB(n, t, d, doc_, ...) { .name = n, .type = t, .def = d, .doc = doc_, __VA_ARGS__ }

static struct knob knobs[] = {
	KNOB("device", K_STRING, "auto",
	     "device to use: auto (a GPU if present), cuda[:N], emulated[:N]",
	     .choices = "auto|cuda|emulated"),
	KNOB("require_direct", K_BOOL, "0",
	     "fail a transfer instead of falling back from the direct path"),
	KNOB("sysfs_root", K_STRING, "/sys",
	     "root of the sysfs tree gdx check and the topology walk read"),
	KNOB("cuda.lib", K_STRING, "libcuda.so.1",
	     "the CUDA driver library, loaded at run time"),
	KNOB("cuda.gather_max", K_SIZE, "64k",
	     "largest pinned-to-device piece of a copy batch that the gather kernel copies "
	     "instead of the copy engine (0: the copy engine for all)",
	     .min = 0, .max = 64 << 10),
	KNOB("procfs_root", K_STRING, "/proc",
	     "root of the procfs tree gdx check reads (modules, driver version, cmdline, meminfo)"),
	KNOB("modules_root", K_STRING, "/lib/modules",
	     "where gdx check looks for loadable kernel modules (<root>/<release>/modules.dep)"),
	KNOB("emulated.devices", K_INT, "1",
	     "number of emulated devices", .min = 1, .max = 16),
	KNOB("emulated.mem_limit", K_SIZE, "16G",
	     "emulated device memory per device", .min = 1 << 20, .max = INT64_MAX),
	KNOB("emulated.host_register_fail_after", K_INT, "0",
	     "for tests: host registrations that succeed before the rest fail with ENOMEM "
	     "(0: none fail; setting it to 0 restarts the count)", .min = 0, .max = INT32_MAX),
	KNOB("emulated.agent_fault_after", K_INT, "0",
	     "for tests: copies a copy agent's workers make before they fault, as a kernel "
	     "would on a bad address (0: never; setting it to 0 restarts the count)",
	     .min = 0, .max = INT32_MAX),
	KNOB("emulated.copy_fault_after", K_INT, "0",
	     "for tests: copies enqueued on streams before the rest are refused with EIO, as "
	     "by a device that has faulted (0: never; setting it to 0 restarts the count)",
	     .min = 0, .max = INT32_MAX),
	KNOB("emulated.agent_copy_us", K_INT, "0",
	     "for tests: microseconds each copy of a copy agent's workers takes (a slow device; "
	     "read when a worker is launched)", .min = 0, .max = 10000000),
	KNOB("emulated.agent_aligned", K_BOOL, "0",
	     "for tests: a copy of a copy agent's workers whose source or destination is not "
	     "16-byte aligned faults: checks that a producer keeps its pieces where the cuda "
	     "agent copies them whole in 16-byte vectors (it copies an unaligned piece's ends "
	     "byte by byte) (read when a worker is launched)"),
	KNOB("file.backend", K_ENUM, "auto",
	     "storage backend for file handles: auto (by priority), cufile, uring or posix",
	     .choices = "auto|cufile|uring|posix"),
	KNOB("file.chunk_size", K_SIZE, "1M",
	     "bounce buffer size: one storage read and one device copy per chunk",
	     .min = 4096, .max = 256 << 20),
	KNOB("file.depth", K_INT, "16",
	     "bounce buffers (and storage I/Os) in flight per I/O context", .min = 1, .max = 1024),
	KNOB("file.streams", K_INT, "4",
	     "read lanes (a device stream and a share of the bounce ring each) of each I/O "
	     "context, taken in turn", .min = 1, .max = 64),
	KNOB("file.copy_word", K_BOOL, "0",
	     "uring: each lane's stream stores how far its copies got in a pinned word the engine "
	     "reads and spins on (0: event records and queries, and blocking waits)"),
	KNOB("file.contexts", K_INT, "16",
	     "I/O contexts per driver (threads doing I/O at once before one waits)",
	     .min = 1, .max = 1024),
	KNOB("file.batch_depth", K_INT, "64",
	     "bounce buffers (and storage I/Os) in flight per batch I/O context",
	     .min = 1, .max = 4096),
	KNOB("file.batch_chunk", K_SIZE, "256k",
	     "bounce buffer size of batch I/O contexts", .min = 4096, .max = 256 << 20),
	KNOB("file.threads", K_INT, "16",
	     "workers (each with its own context and thread) one large I/O is spread over",
	     .min = 1, .max = 64),
	KNOB("file.split_min", K_SIZE, "64M",
	     "smallest I/O that is split over file.threads contexts", .min = 1 << 20,
	     .max = INT64_MAX),
	KNOB("file.split_piece", K_SIZE, "16M",
	     "pieces a split I/O is cut into; each worker takes the next when it has issued "
	     "all of its own", .min = 4096, .max = INT64_MAX),
	KNOB("file.split_chunk", K_SIZE, "4M",
	     "bounce buffer size of the contexts the workers of a split I/O run on",
	     .min = 4096, .max = 256 << 20),
	KNOB("file.split_depth", K_INT, "2",
	     "bounce buffers (and storage I/Os) in flight per split-I/O worker",
	     .min = 1, .max = 1024),
	KNOB("file.split_streams", K_INT, "1",
	     "read lanes (device streams) of each split-I/O worker's context", .min = 1, .max = 64),
	KNOB("file.split_pread", K_BOOL, "1",
	     "split-I/O workers read cached chunks with pread on their own thread (not io_uring)"),
	KNOB("file.odirect", K_BOOL, "1",
	     "open files with O_DIRECT too where the filesystem allows it"),
	KNOB("file.pagecache", K_BOOL, "1",
	     "copy hot data to the device straight out of the page cache (mapped and registered); "
	     "0 still reads cached chunks buffered, not O_DIRECT"),
	KNOB("file.pagecache_min", K_SIZE, "1M",
	     "smallest device read that probes the page cache (smaller ones go by bounce, "
	     "O_DIRECT where allowed)",
	     .min = 0, .max = INT64_MAX),
	KNOB("file.pagecache_chunk", K_SIZE, "16M",
	     "page-cache range registered with the device at a time", .min = 4096, .max = 1ll << 32),
	KNOB("file.pagecache_depth", K_INT, "3",
	     "page-cache ranges registered at once (one copies while the next registers)",
	     .min = 1, .max = 64),
	KNOB("file.pagecache_threads", K_INT, "0",
	     "workers of a split I/O that register page-cache ranges, the rest copy hot data "
	     "with the CPU", .min = 0, .max = 64),
	KNOB("file.workers", K_INT, "4",
	     "threads running batch and stream-ordered file I/O", .min = 1, .max = 256),
	KNOB("file.spin_us", K_INT, "200",
	     "microseconds a file worker polls for the next stream-ordered I/O before it sleeps",
	     .min = 0, .max = 100000),
	KNOB("file.posix_threads", K_INT, "8",
	     "threads of the posix backend's pread/pwrite pool", .min = 1, .max = 256),
	KNOB("file.cufile_lib", K_STRING, "libcufile.so.0",
	     "the cuFile library the cufile backend loads"),
	KNOB("pipeline.spin_us", K_INT, "200",
	     "microseconds a pipeline thread (producer, host stage) polls for its next batch or "
	     "event before it sleeps", .min = 0, .max = 100000),
	KNOB("pipeline.poll_ns", K_INT, "1000",
	     "least nanoseconds between two queries of a device event by a polling pipeline thread",
	     .min = 0, .max = 1000000),
	KNOB("xport.tcp_zerocopy", K_BOOL, "1",
	     "tcp transport: send large host payloads with MSG_ZEROCOPY where the kernel has it"),
	KNOB("xport.tcp_copy_agent", K_BOOL, "1",
	     "tcp transport: device memory is copied by a copy agent, from a pinned ring when "
	     "received and into pinned stage buffers when sent, no driver call per message "
	     "(0: a stream, synchronised per message or burst)"),
	KNOB("xport.tcp_poll_read", K_BOOL, "1",
	     "tcp transport: a caller whose poll finds its CQ empty reads the socket itself, as a "
	     "sleeper does on waking, instead of waiting for the receive thread to hand over"),
	KNOB("xport.tcp_rx_spin_us", K_INT, "0",
	     "tcp transport: the receive thread polls the socket this long before it sleeps",
	     .min = 0, .max = 10000),
	KNOB("xport.tcp_resp_hold_ms", K_INT, "1",
	     "tcp transport: the response to a received send waits at most this long for the "
	     "caller's next post to carry it in the same write (it goes at once when the caller "
	     "polls an empty CQ or sleeps on it)", .min = 1, .max = 1000),
	KNOB("xport.tcp_rx_ring", K_SIZE, "2M",
	     "tcp transport: pinned receive ring per endpoint for the copy agent (pieces of at "
	     "most an eighth of it)", .min = 64 << 10, .max = 1 << 30),
	KNOB("xport.tcp_kept_ring", K_SIZE, "4M",
	     "tcp transport: pinned ring per endpoint with a copy agent for messages that came "
	     "before their receive; the receive thread copies them on when one is posted (0: "
	     "kept in host memory and copied by the posting thread)", .min = 0, .max = 1 << 30),
	KNOB("xport.tcp_handshakes", K_INT, "64",
	     "tcp transport: connections a listener handshakes with at once (each for the "
	     "endpoint option timeout_ms); a new one beyond them drops the oldest",
	     .min = 1, .max = 65536),
	KNOB("xport.tcp_answers_max", K_INT, "4096",
	     "tcp transport: answers (to reads, writes, sends; refusals too) a connection may "
	     "have queued unsent; beyond it its frames are not read until half went out",
	     .min = 64, .max = 1 << 20),
	KNOB("xport.tcp_answers_copy_max", K_SIZE, "64M",
	     "tcp transport: bytes a connection's read answers not sent yet may copy because "
	     "a write overlaps them; a write that needs more is refused", .min = 0,
	     .max = 1ll << 40),
	KNOB("xport.tcp_answers_timeout_ms", K_INT, "10000",
	     "tcp transport: how long a connection over xport.tcp_answers_max may take to send "
	     "half of them before it is ended", .min = 10, .max = 3600000),
	KNOB("nvmf.host.queues", K_INT, "0",
	     "NVMe/TCP host: I/O queues per controller (0: CPUs of the device's NUMA node, at most 8)",
	     .min = 0, .max = 256),
	KNOB("nvmf.host.queue_depth", K_INT, "128",
	     "NVMe/TCP host: entries per I/O queue (clamped to the controller's MQES and MAXCMD)",
	     .min = 2, .max = 1024),
	KNOB("nvmf.host.cpus", K_STRING, "auto",
	     "NVMe/TCP and RDMA host: I/O queue i's receiver runs on the (i mod n)-th of these "
	     "CPUs: all (those the process may run on at connect), a list (\"0-3,6\"), none "
	     "(unpinned), or auto (all over RDMA, none over TCP)"),
	KNOB("nvmf.host.kato_ms", K_INT, "5000",
	     "NVMe/TCP host: keep-alive timeout in ms; Keep Alive goes out every half of it",
	     .min = 0, .max = 3600000),
	KNOB("nvmf.host.io_timeout_ms", K_INT, "30000",
	     "NVMe/TCP host: per-command timeout in ms", .min = 10, .max = 3600000),
	KNOB("nvmf.host.connect_timeout_ms", K_INT, "10000",
	     "NVMe/TCP host: TCP connect, ICResp and each setup command, in ms",
	     .min = 10, .max = 600000),
	KNOB("nvmf.host.reconnect_delay_ms", K_INT, "1000",
	     "NVMe/TCP host: delay before the first reconnect; doubles up to 8x",
	     .min = 1, .max = 600000),
	KNOB("nvmf.host.ctrl_loss_tmo_ms", K_INT, "60000",
	     "NVMe/TCP host: give up reconnecting after this many ms and fail pending I/O",
	     .min = 1, .max = 86400000),
	KNOB("nvmf.host.max_retries", K_INT, "5",
	     "NVMe/TCP host: resubmissions of one command after connection losses",
	     .min = 0, .max = 1000),
	KNOB("nvmf.host.hdr_digest", K_BOOL, "0", "NVMe/TCP host: ask for header digests"),
	KNOB("nvmf.host.data_digest", K_BOOL, "0", "NVMe/TCP host: ask for data digests"),
	KNOB("nvmf.host.sqflow_off", K_BOOL, "1",
	     "NVMe/TCP host: I/O queues ask for SQ flow control off (reads may end with C2HData SUCCESS)"),
	KNOB("nvmf.host.max_io", K_SIZE, "1M",
	     "NVMe/TCP host: largest single command; bigger I/O is split (MDTS also applies)",
	     .min = 4096, .max = 4 << 20),
	KNOB("nvmf.host.rdma_device_reg", K_ENUM, "auto",
	     "NVMe/RDMA host: how the NIC may register device memory: auto (a dma-buf, else "
	     "peer memory), dmabuf, peer, or off (where none works: the bounce)",
	     .choices = "auto|dmabuf|peer|off"),
	KNOB("nvmf.host.rdma_regcache", K_BOOL, "1",
	     "NVMe/RDMA host: register pinned and device allocations whole, once (0: each "
	     "command's buffer, for the command)"),
	KNOB("nvmf.host.bounce_chunk", K_SIZE, "256k",
	     "NVMe/TCP and RDMA host: pinned chunk size of each queue's device-memory bounce "
	     "ring (over RDMA also the largest bounced command)",
	     .min = 4096, .max = 64 << 20),
	KNOB("nvmf.host.bounce_chunks", K_INT, "4",
	     "NVMe/TCP and RDMA host: chunks per bounce ring (receives overlap H2D copies; "
	     "over RDMA at least 2, per direction)",
	     .min = 1, .max = 64),
	KNOB("nvmf.host.copy_batch", K_INT, "1",
	     "NVMe/TCP host: H2D copies of PDUs received back to back (one receive burst) "
	     "enqueued in one call, up to this many (1: each at once)",
	     .min = 1, .max = 64),
	KNOB("nvmf.host.copy_word", K_BOOL, "1",
	     "NVMe/TCP host: each queue's stream stores how far its H2D copies got in a pinned "
	     "word the receiver reads (0: event records and queries)"),
	KNOB("nvmf.host.copy_agent", K_INT, "4",
	     "NVMe/TCP host: device reads hand their H2D copies to a copy agent, this many "
	     "resident GPU workers (at most one per I/O queue) polling descriptor rings in "
	     "pinned memory: no driver call per read (0: the queues' streams copy)",
	     .min = 0, .max = 64),
	KNOB("nvmf.host.lat_stats", K_BOOL, "1",
	     "NVMe/TCP host: time each read's stages (a few clock reads per read) and sum them "
	     "per queue: the lat_* counters of gdx_nvmf_ctrl_stats_json"),
	KNOB("nvmf.target.lat_stats", K_BOOL, "1",
	     "NVMe/TCP target: time each I/O read's stages (three clock reads per read) and "
	     "the reactors' sleep, poll and busy time: nvmf.target.lat in the target's stats JSON"),
	KNOB("nvmf.target.max_conns", K_INT, "4096",
	     "NVMe/TCP target: connections served at once; more are accepted and closed at once "
	     "(logged at most once a second, counted in connections_refused)",
	     .min = 1, .max = 1000000),
	KNOB("nvmf.target.handshake_timeout_ms", K_INT, "10000",
	     "NVMe/TCP target: a connection that has not sent ICReq and a successful Connect "
	     "(on a TLS port: finished its TLS handshake too) this long after it was accepted "
	     "is closed (checked once a second)",
	     .min = 1, .max = 3600000),
	KNOB("nvmf.target.auth_timeout_ms", K_INT, "30000",
	     "NVMe-oF target: a queue that requires DH-HMAC-CHAP has this long for each "
	     "authentication transaction (from its Connect, or from a Negotiate); past it the "
	     "controller is failed and its connections closed (checked once a second)",
	     .min = 100, .max = 3600000),
	KNOB("nvmf.target.conn_buf_max", K_SIZE, "32M",
	     "NVMe-oF target (TCP and RDMA): request buffers one queue may hold (TCP: file "
	     "namespaces' data, in-capsule and R2T data; RDMA: the buffers its RDMA READs "
	     "and WRITEs use); beyond it its commands that need one (TCP: reads and R2T "
	     "writes; RDMA: keyed data either way) wait until its buffers free (one command, "
	     "at most MDTS, may go over)",
	     .min = 65536, .max = 1ll << 40),
	KNOB("nvmf.target.buf_max", K_SIZE, "512M",
	     "NVMe-oF target (TCP and RDMA): request buffers all queues of both transports "
	     "together may hold; beyond it such commands wait on every queue that holds "
	     "some (buffers kept for reuse go first); a queue that holds none may start "
	     "one, so each queue may take it one command over",
	     .min = 65536, .max = 1ll << 40),
	KNOB("nvmf.target.stall_timeout_ms", K_INT, "30000",
	     "NVMe-oF target: a TCP connection with PDUs to send of which the host has taken "
	     "none, or with an R2T whose data has not come, or an RDMA queue whose RDMA "
	     "READs and response SENDs see no completion (a host that posts no receive is "
	     "retried without end), for this long is closed, keep-alive or not (checked once "
	     "a second)",
	     .min = 1, .max = 3600000),
	KNOB("nvmf.target.rdma_srq", K_INT, "256",
	     "NVMe/RDMA target: receives in the shared receive queue each reactor keeps on a "
	     "device where the device has one, which all its queue pairs there take commands "
	     "from (each as large as the largest capsule: 64 bytes and --inline; 256 is "
	     "plenty); 0: a receive queue per queue pair, one receive per entry",
	     .min = 0, .max = 65536),
	KNOB("nvmf.target.splice", K_ENUM, "auto",
	     "NVMe/TCP target: reads of 64 KiB and more from RAM namespaces leave by vmsplice + "
	     "splice (no copy on the way out): auto for hosts on other machines (a host on this "
	     "one copies the bytes in anyway, and the page references cost more), on, off",
	     .choices = "auto|on|off"),
	KNOB("tls.record", K_ENUM, "auto",
	     "TLS 1.3 (NVMe/TCP, tcp transport): who makes the records after the handshake: "
	     "auto (the kernel's kTLS where it takes the keys, else a relay thread per "
	     "connection running OpenSSL's, said once in the log), kernel (kTLS, or the "
	     "connection fails), user (the relay)",
	     .choices = "auto|kernel|user"),
	KNOB("nvmf.host.post_first", K_BOOL, "1",
	     "NVMe/TCP host: with a done word, a received piece's H2D copy is posted before the "
	     "device reads held so far complete (their callbacks then cannot delay it)"),
	KNOB("nvmf.host.copy_poll_us", K_INT, "0",
	     "NVMe/TCP host: an idle receiver polls its socket and its H2D copies this long "
	     "before blocking on the copies (0: block at once)",
	     .min = 0, .max = 100000),
	KNOB("nvmf.host.rdma_poll_us", K_INT, "0",
	     "NVMe/RDMA host: a receiver polls its completion queue at most this long after its "
	     "last completions before it sleeps on the completion channel, the window adapted "
	     "to the sleeps it saw: grown to cover those shorter than this cap, halved on "
	     "longer ones (0: sleep at once)",
	     .min = 0, .max = 100000),
};

static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Why the last file load was refused, and why $GDX_CONFIG was (empty: it
 * loaded or there is none).  The load at start-up logs nothing itself: the
 * first gdx_config_check (every device open makes one) reports it.
 */
static char load_err[512], env_file_err[512];
static bool quiet_load;

/*
 * Values replaced by a set or a file load: gdx_cfg_str handed them out without
 * a copy, so they are kept until gdx_config_reset.  Replacing values is rare
 * (start-up, tests), so the list stays short.
 */
static char **retired;
static size_t nretired, retired_cap;

/* Caller holds cfg_lock. */
static void retire(char *v)
{
	if (!v)
		return;
	if (nretired == retired_cap) {
		size_t cap = retired_cap ? retired_cap * 2 : 16;
		char **r = realloc(retired, cap * sizeof(*r));

		if (!r) {
			free(v);	/* out of memory: a reader may lose, but no leak */
			return;
		}
		retired = r;
		retired_cap = cap;
	}
	retired[nretired++] = v;
}

static struct knob *find(const char *name)
{
	for (size_t i = 0; i < GDX_ARRAY_SIZE(knobs); i++)
		if (!strcmp(knobs[i].name, name))
			return &knobs[i];
	return NULL;
}

/* Caller holds cfg_lock: the name is filled in on first use. */
static const char *env_name(struct knob *k)
{
	if (!k->env[0]) {
		size_t j = snprintf(k->env, sizeof(k->env), "GDX_");

		for (const char *c = k->name; *c && j + 1 < sizeof(k->env); c++)
			k->env[j++] = *c == '.' ? '_' : (char)toupper((unsigned char)*c);
		k->env[j] = 0;
	}
	return k->env;
}

/* Keeps why a load is refused, logs it (but not at start-up), returns GDX_ECONFIG. */
__attribute__((format(printf, 1, 2))) static int refuse(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(load_err, sizeof(load_err), fmt, ap);
	va_end(ap);
	if (!quiet_load)
		GDX_ERR("config", "%s", load_err);
	return GDX_ECONFIG;
}

/* Decimal, or hex after 0x; never octal: "010" is ten, as a person writing it means. */
static int num_base(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '+' || *s == '-')
		s++;
	return s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 16 : 10;
}

int gdx_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, num_base(s));
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: return -EINVAL;
	}
	if ((*end == 'i' || *end == 'I') && shift)
		end++;
	if ((*end == 'b' || *end == 'B') && shift)
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

int gdx_parse_device_spec(const char *spec, size_t *kind_len, int *ordinal)
{
	const char *colon = strchr(spec, ':');

	*kind_len = colon ? (size_t)(colon - spec) : strlen(spec);
	*ordinal = -1;
	if (colon) {
		char *end;
		long n;

		errno = 0;
		n = strtol(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || n < 0 || n > 1024)
			return -EINVAL;
		*ordinal = (int)n;
	}
	return 0;
}

int gdx_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* Is v[0..n) one of choices ("a|b|c")? */
static bool is_choice(const char *choices, const char *v, size_t n)
{
	for (const char *c = choices; c && *c;) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);

		if (len == n && !strncmp(c, v, n))
			return true;
		c = bar ? bar + 1 : NULL;
	}
	return false;
}

static int validate(const struct knob *k, const char *v)
{
	size_t klen;
	int ordinal;
	uint64_t u;
	bool b;

	switch (k->type) {
	case K_INT: {
		char *end;
		long long x;

		errno = 0;
		x = strtoll(v, &end, num_base(v));
		if (errno || end == v || *end)
			return -EINVAL;
		if ((k->min || k->max) && (x < k->min || x > k->max))
			return -ERANGE;
		return 0;
	}
	case K_SIZE:
		if (gdx_parse_size(v, &u))
			return -EINVAL;
		if ((k->min || k->max) && (u < (uint64_t)k->min || u > (uint64_t)k->max))
			return -ERANGE;
		return 0;
	case K_BOOL:
		return gdx_parse_bool(v, &b);
	case K_ENUM:
		return is_choice(k->choices, v, strlen(v)) ? 0 : -EINVAL;
	case K_STRING:
		if (!k->choices)
			return 0;
		/* a choice, or a choice and ":N" (a device ordinal, as the device layer reads it) */
		if (gdx_parse_device_spec(v, &klen, &ordinal))
			return -EINVAL;
		return is_choice(k->choices, v, klen) ? 0 : -EINVAL;
	}
	return -EINVAL;
}

void gdx_size_text(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "kMGT";
	int u = 0;

	while (u < 4 && v && !(v & 1023)) {
		v >>= 10;
		u++;
	}
	if (u)
		snprintf(buf, len, "%" PRIu64 "%c", v, units[u - 1]);
	else
		snprintf(buf, len, "%" PRIu64, v);
}

/* What k accepts, in words, for the message that refuses a value. */
static void expected(const struct knob *k, char *buf, size_t len)
{
	char lo[24], hi[24];

	switch (k->type) {
	case K_INT:
		snprintf(buf, len, "an integer from %" PRId64 " to %" PRId64, k->min, k->max);
		return;
	case K_SIZE:
		gdx_size_text((uint64_t)k->min, lo, sizeof(lo));
		gdx_size_text((uint64_t)k->max, hi, sizeof(hi));
		if (k->max == INT64_MAX)
			snprintf(buf, len, "a size of at least %s (bytes, or with k, M, G or T)", lo);
		else
			snprintf(buf, len, "a size from %s to %s (bytes, or with k, M, G or T)", lo, hi);
		return;
	case K_BOOL:
		snprintf(buf, len, "1, 0, true, false, yes, no, on or off");
		return;
	case K_ENUM:
		snprintf(buf, len, "one of %s", k->choices);
		return;
	case K_STRING:
		snprintf(buf, len, "one of %s, each optionally with :N", k->choices);
		return;
	}
}

/* Caller holds cfg_lock. */
static const char *resolve(struct knob *k)
{
	char want[128];
	const char *v;

	if (k->set_val)
		return k->set_val;
	v = getenv(env_name(k));
	if (v) {
		if (!validate(k, v))
			return v;
		if (!k->warned) {
			k->warned = 1;
			expected(k, want, sizeof(want));
			GDX_WARN("config", "ignoring %s='%s' (want %s); using %s", k->env, v, want,
				 k->file_val ? k->file_val : k->def);
		}
	}
	if (k->file_val)
		return k->file_val;
	return k->def;
}

static struct knob *must_find(const char *name)
{
	struct knob *k = find(name);

	if (!k) {
		GDX_ERR("config", "unknown knob '%s'", name);
		abort();
	}
	return k;
}

int64_t gdx_cfg_int(const char *name)
{
	struct knob *k = must_find(name);
	const char *text;
	int64_t v;

	pthread_mutex_lock(&cfg_lock);
	text = resolve(k);
	v = strtoll(text, NULL, num_base(text));
	pthread_mutex_unlock(&cfg_lock);
	return v;
}

uint64_t gdx_cfg_size(const char *name)
{
	struct knob *k = must_find(name);
	uint64_t v = 0;

	pthread_mutex_lock(&cfg_lock);
	if (gdx_parse_size(resolve(k), &v))
		gdx_parse_size(k->def, &v);
	pthread_mutex_unlock(&cfg_lock);
	return v;
}

bool gdx_cfg_bool(const char *name)
{
	struct knob *k = must_find(name);
	bool v = false;

	pthread_mutex_lock(&cfg_lock);
	if (gdx_parse_bool(resolve(k), &v))
		gdx_parse_bool(k->def, &v);
	pthread_mutex_unlock(&cfg_lock);
	return v;
}

const char *gdx_cfg_str(const char *name)
{
	struct knob *k = must_find(name);
	const char *v;

	pthread_mutex_lock(&cfg_lock);
	v = resolve(k);
	pthread_mutex_unlock(&cfg_lock);
	return v;
}

GDX_API int gdx_config_set(const char *name, const char *value)
{
	struct knob *k;
	char *copy = NULL;
	int ret;

	if (!name)
		return -EINVAL;
	k = find(name);
	if (!k)
		return -ENOENT;
	if (value) {
		ret = validate(k, value);
		if (ret)
			return ret;
		copy = strdup(value);
		if (!copy)
			return -ENOMEM;
	}
	pthread_mutex_lock(&cfg_lock);
	retire(k->set_val);
	k->set_val = copy;	/* NULL: back to env / file / default */
	pthread_mutex_unlock(&cfg_lock);
	return 0;
}

GDX_API int gdx_config_get(const char *name, char *buf, size_t len)
{
	struct knob *k;
	int n;

	if (!name || !buf)
		return -EINVAL;
	k = find(name);
	if (!k)
		return -ENOENT;
	pthread_mutex_lock(&cfg_lock);
	n = snprintf(buf, len, "%s", resolve(k));
	pthread_mutex_unlock(&cfg_lock);
	if (n < 0)
		return -EINVAL;
	return (size_t)n >= len ? -ENOSPC : n;
}

GDX_API int gdx_config_knob(unsigned i, struct gdx_config_knob_info *info)
{
	static const char *const tnames[] = { "int", "size", "bool", "string", "enum" };

	if (i < GDX_ARRAY_SIZE(knobs) && info) {
		struct knob *k = &knobs[i];

		/* env_name() fills k->env on first use, which resolve() reads under the lock. */
		pthread_mutex_lock(&cfg_lock);
		info->env = env_name(k);
		pthread_mutex_unlock(&cfg_lock);
		info->name = k->name;
		info->type = tnames[k->type];
		info->def = k->def;
		info->doc = k->doc;
	}
	return (int)GDX_ARRAY_SIZE(knobs);
}

/* JSON types a knob accepts: text always; numbers and booleans where they mean something. */
static const char *leaf_text(const struct knob *k, json_object *val)
{
	const char *s;

	switch (json_object_get_type(val)) {
	case json_type_string:
		/* An embedded NUL would silently cut the value short. */
		s = json_object_get_string(val);
		return strlen(s) == (size_t)json_object_get_string_len(val) ? s : NULL;
	case json_type_int:
		return k->type == K_INT || k->type == K_SIZE || k->type == K_BOOL ?
			json_object_get_string(val) : NULL;
	case json_type_boolean:
		return k->type == K_BOOL ? (json_object_get_boolean(val) ? "1" : "0") : NULL;
	default:
		return NULL;	/* null, double, array */
	}
}

/*
 * Walks a JSON object; "a": {"b": 1} names the knob "a.b".  Values go into
 * staged[] (indexed like knobs[]) so a bad file changes nothing.
 */
static int load_obj(json_object *obj, const char *prefix, const char *path, char **staged)
{
	json_object_object_foreach(obj, key, val) {
		char name[128];
		struct knob *k;
		const char *text;
		size_t i;
		int n, ret;

		n = snprintf(name, sizeof(name), "%s%s%s", prefix, *prefix ? "." : "", key);
		if (n < 0 || (size_t)n >= sizeof(name))
			return refuse("%s: unknown key '%.40s...'", path, name);
		if (json_object_is_type(val, json_type_object)) {
			ret = load_obj(val, name, path, staged);
			if (ret)
				return ret;
			continue;
		}
		k = find(name);
		if (!k)
			return refuse("%s: unknown key '%s' (gdx config lists the knobs)", path, name);
		text = leaf_text(k, val);
		if (!text || validate(k, text)) {
			char want[128];

			expected(k, want, sizeof(want));
			return refuse("%s: bad value %s for '%s' (want %s)", path,
				      json_object_to_json_string(val), name, want);
		}
		i = (size_t)(k - knobs);
		free(staged[i]);	/* a key given twice: the last one wins */
		staged[i] = strdup(text);
		if (!staged[i])
			return -ENOMEM;
	}
	return 0;
}

/* Reads and parses path; logs why not (open error, or the JSON error and its line). */
static json_object *parse_file(const char *path)
{
	enum { MAX_CONFIG = 1 << 20 };
	json_tokener *tok = NULL;
	json_object *root = NULL;
	enum json_tokener_error jerr;
	char *text = NULL;
	size_t len = 0, at;
	FILE *f;
	int line = 1, col = 1;

	f = fopen(path, "re");
	if (!f) {
		refuse("%s: %s", path, strerror(errno));
		return NULL;
	}
	/* Grows as it reads: config files are small, and pipes have no size to ask. */
	for (size_t cap = 0;;) {
		size_t n;

		if (len == cap) {
			char *t;

			if (cap > MAX_CONFIG)
				break;
			cap = cap ? cap * 2 : 4096;
			t = realloc(text, cap);
			if (!t) {
				refuse("%s: out of memory", path);
				goto out;
			}
			text = t;
		}
		n = fread(text + len, 1, cap - len, f);
		len += n;
		if (!n)
			break;
	}
	if (ferror(f) || len > MAX_CONFIG) {
		refuse("%s: %s", path, ferror(f) ? "read error" : "larger than 1 MiB");
		goto out;
	}
	tok = json_tokener_new();
	if (!tok) {
		refuse("%s: out of memory", path);
		goto out;
	}
	root = json_tokener_parse_ex(tok, text, (int)len);
	jerr = json_tokener_get_error(tok);
	at = json_tokener_get_parse_end(tok);
	/* Only whitespace may follow the value. */
	while (root && at < len && strchr(" \t\r\n", text[at]))
		at++;
	if (!root || jerr != json_tokener_success || at < len) {
		for (size_t i = 0; i < at && i < len; i++) {
			line += text[i] == '\n';
			col = text[i] == '\n' ? 1 : col + 1;
		}
		refuse("%s:%d:%d: %s", path, line, col,
			jerr == json_tokener_continue ? "unexpected end of file" :
			jerr != json_tokener_success ? json_tokener_error_desc(jerr) :
			"text after the JSON value");
		json_object_put(root);
		root = NULL;
	}
out:
	if (tok)
		json_tokener_free(tok);
	free(text);
	fclose(f);
	return root;
}

GDX_API int gdx_config_load_file(const char *path)
{
	char *staged[GDX_ARRAY_SIZE(knobs)] = { 0 };
	json_object *root;
	int ret;

	if (!path)
		return -EINVAL;
	root = parse_file(path);
	if (!root)
		return GDX_ECONFIG;
	if (!json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return refuse("%s: top level must be an object", path);
	}
	ret = load_obj(root, "", path, staged);
	json_object_put(root);
	/* The file layer is replaced whole, so knobs the new file omits fall back. */
	pthread_mutex_lock(&cfg_lock);
	for (size_t i = 0; i < GDX_ARRAY_SIZE(knobs); i++) {
		if (ret) {
			free(staged[i]);
			continue;
		}
		retire(knobs[i].file_val);
		knobs[i].file_val = staged[i];
	}
	pthread_mutex_unlock(&cfg_lock);
	return ret;
}

void gdx_config_reset(void)
{
	pthread_mutex_lock(&cfg_lock);
	for (size_t i = 0; i < GDX_ARRAY_SIZE(knobs); i++) {
		free(knobs[i].set_val);
		free(knobs[i].file_val);
		knobs[i].set_val = NULL;
		knobs[i].file_val = NULL;
		knobs[i].warned = 0;
	}
	for (size_t i = 0; i < nretired; i++)
		free(retired[i]);
	free(retired);
	retired = NULL;
	nretired = retired_cap = 0;
	pthread_mutex_unlock(&cfg_lock);
}

int gdx_config_check(char *buf, size_t len)
{
	const char *v;
	char want[128];

	if (env_file_err[0]) {
		snprintf(buf, len, "GDX_CONFIG: %s", env_file_err);
		return GDX_ECONFIG;
	}
	pthread_mutex_lock(&cfg_lock);
	for (size_t i = 0; i < GDX_ARRAY_SIZE(knobs); i++) {
		struct knob *k = &knobs[i];

		v = getenv(env_name(k));
		if (k->set_val || !v || !validate(k, v))
			continue;
		expected(k, want, sizeof(want));
		snprintf(buf, len, "%s='%s': want %s", k->env, v, want);
		pthread_mutex_unlock(&cfg_lock);
		return GDX_ECONFIG;
	}
	pthread_mutex_unlock(&cfg_lock);
	v = getenv("GDX_LOG_LEVEL");
	if (v && gdx_log_level_parse(v) < 0) {
		snprintf(buf, len, "GDX_LOG_LEVEL='%s': want error, warn, info, debug, trace "
			 "or 0 to 4", v);
		return GDX_ECONFIG;
	}
	return 0;
}

/* $GDX_CONFIG loads before main(); a file that is refused is reported by gdx_config_check. */
__attribute__((constructor)) static void config_init(void)
{
	const char *path = getenv("GDX_CONFIG");

	quiet_load = true;
	if (path && gdx_config_load_file(path))
		snprintf(env_file_err, sizeof(env_file_err), "%s", load_err);
	quiet_load = false;
}
