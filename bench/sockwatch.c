/* SPDX-License-Identifier: MIT */
/* Where a loopback tcp connection's bytes wait (sockwatch.h). */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/sockios.h>

#include "sockwatch.h"

/* Between samples: fine enough for 64 KiB frames, which take about 10 µs each on loopback. */
#define SW_PERIOD_NS 20000

struct sockwatch {
	int cli, srv;
	const unsigned *inflight;
	unsigned depth;
	int stop;
	pthread_t th;
	struct sockwatch_tally t;
};

/* The port of a bound or connected TCP socket (peer: the other end's), or -1. */
static int sock_port(int fd, bool peer)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	if ((peer ? getpeername(fd, (struct sockaddr *)&a, &len)
		  : getsockname(fd, (struct sockaddr *)&a, &len)))
		return -1;
	if (a.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&a)->sin_port);
	if (a.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
	return -1;
}

/* Whether fd is a connected TCP socket. */
static bool is_tcp_conn(int fd)
{
	int proto = 0;
	socklen_t len = sizeof(proto);

	return !getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) && proto == IPPROTO_TCP &&
	       sock_port(fd, true) >= 0;
}

/* Finds the client's end (its peer is port lport) and the server's end of the same connection. */
static int find_pair(unsigned lport, int *cli, int *srv)
{
	int fds[64], n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d)) && n < 64) {
		int fd = atoi(e->d_name);

		if (fd > 2 && fd != dirfd(d) && is_tcp_conn(fd))
			fds[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++) {
		int cport = sock_port(fds[i], false);

		if (sock_port(fds[i], true) != (int)lport)
			continue;
		for (int j = 0; j < n; j++) {
			if (j != i && sock_port(fds[j], false) == (int)lport &&
			    sock_port(fds[j], true) == cport) {
				*cli = fds[i];
				*srv = fds[j];
				return 0;
			}
		}
	}
	return -ENOENT;
}

static int queued(int fd, unsigned long req)
{
	int v = 0;

	return ioctl(fd, req, &v) ? 0 : v;
}

static void *sw_main(void *arg)
{
	struct sockwatch *w = arg;
	const struct timespec period = { 0, SW_PERIOD_NS };

	/* the default slack (50 µs) would stretch each period past a frame's time */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	while (!__atomic_load_n(&w->stop, __ATOMIC_RELAXED)) {
		int k;

		if (queued(w->srv, SIOCINQ))
			k = SW_SERVER_UNREAD;
		else if (queued(w->cli, SIOCOUTQNSD) || queued(w->srv, SIOCOUTQNSD))
			k = SW_UNSENT;
		else if (queued(w->cli, SIOCINQ))
			k = SW_CLIENT_UNREAD;
		else if (__atomic_load_n(w->inflight, __ATOMIC_RELAXED) >= w->depth)
			k = SW_WINDOW_FULL;
		else
			k = SW_IDLE;
		w->t.n[k]++;
		w->t.samples++;
		nanosleep(&period, NULL);
	}
	return NULL;
}

int sockwatch_start(struct sockwatch **wp, unsigned lport, const unsigned *inflight,
		    unsigned depth)
{
	struct sockwatch *w = calloc(1, sizeof(*w));
	int ret;

	if (!w)
		return -ENOMEM;
	w->inflight = inflight;
	w->depth = depth;
	ret = find_pair(lport, &w->cli, &w->srv);
	if (!ret && (ret = -pthread_create(&w->th, NULL, sw_main, w)) == 0) {
		*wp = w;
		return 0;
	}
	free(w);
	return ret;
}

void sockwatch_stop(struct sockwatch *w, struct sockwatch_tally *t)
{
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
	pthread_join(w->th, NULL);
	t->samples += w->t.samples;
	for (int k = 0; k < SW_NCLASS; k++)
		t->n[k] += w->t.n[k];
	free(w);
}
