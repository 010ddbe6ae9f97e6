/* SPDX-License-Identifier: MIT */
/*
 * The fault proxy (nvmf_proxy.h).  One thread accepts; one thread per
 * connection moves PDUs both ways with non-blocking sockets and poll, so that
 * a stop pipe, written once and never drained, ends every wait at once.  Whole
 * PDUs are buffered before they go on: a rule acts on a PDU boundary, and a
 * truncation cuts inside one.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nvmf/proto/tcp.h"
#include "nvmf_proxy.h"

#define FP_MAX_CONNS 256
#define FP_MAX_PDU (16u << 20)

struct fp_half {
	int *src, *dst;
	enum fp_dir dir;
	uint8_t *buf;
	size_t cap, have;
	unsigned count[256];	/* PDUs seen per type */
	unsigned all;
};

struct fp_conn {
	struct fproxy *p;
	unsigned idx;
	int down, up;		/* the host's connection, the target's */
	bool stalled;
	struct fp_half half[2];
	pthread_t thread;
};

struct fproxy {
	int lfd;
	int stop[2];
	unsigned short tport;
	pthread_mutex_t lock;	/* rules' fired counts, conns */
	struct fp_rule rules[FP_MAX_RULES];
	unsigned fired[FP_MAX_RULES];
	unsigned nrules;
	struct fp_conn *conns[FP_MAX_CONNS];
	unsigned nconns;
	pthread_t thread;
};

/* 0, or -1 once the stop pipe fired or the peer failed. */
static int wait_fd(struct fproxy *p, int fd, short ev)
{
	struct pollfd pfd[2] = { { .fd = fd, .events = ev }, { .fd = p->stop[0], .events = POLLIN } };

	for (;;) {
		int n = poll(pfd, 2, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || pfd[1].revents)
			return -1;
		if (pfd[0].revents)
			return 0;
	}
}

static int send_all(struct fproxy *p, int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k > 0) {
			b += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (wait_fd(p, fd, POLLOUT))
			return -1;
	}
	return 0;
}

static void close_conn(struct fp_conn *c, bool rst)
{
	struct linger lg = { 1, 0 };

	if (c->down < 0)
		return;
	if (rst) {
		setsockopt(c->down, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		setsockopt(c->up, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	close(c->down);
	close(c->up);
	c->down = c->up = -1;
}

/* The first rule not yet fired that names this PDU, else NULL. */
static const struct fp_rule *match(struct fp_conn *c, struct fp_half *h, uint8_t type)
{
	struct fproxy *p = c->p;
	const struct fp_rule *hit = NULL;

	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < p->nrules && !hit; i++) {
		const struct fp_rule *r = &p->rules[i];

		if (p->fired[i] || (r->conn >= 0 && (unsigned)r->conn != c->idx) || r->dir != h->dir)
			continue;
		if (r->type >= 0 ? r->type != type || r->nth != h->count[type] : r->nth != h->all)
			continue;
		p->fired[i]++;
		hit = r;
	}
	pthread_mutex_unlock(&p->lock);
	return hit;
}

/* Forwards (or not) one whole PDU; -1 ends the connection. */
static int pdu(struct fp_conn *c, struct fp_half *h, const uint8_t *b, size_t n)
{
	const struct fp_rule *r;

	h->count[b[0]]++;
	h->all++;
	r = match(c, h, b[0]);
	if (!r)
		return send_all(c->p, *h->dst, b, n);
	fprintf(stderr, "fproxy: conn %u %s PDU %#x #%u: %s\n", c->idx,
		h->dir == FP_H2C ? "h2c" : "c2h", b[0], r->type >= 0 ? h->count[b[0]] : h->all,
		(const char *[]){ "reset", "reset after", "truncate", "cut", "duplicate", "delay",
				  "stall" }[r->act]);
	switch (r->act) {
	case FP_RESET:
		close_conn(c, true);
		return -1;
	case FP_RESET_AFTER:
		send_all(c->p, *h->dst, b, n);
		close_conn(c, true);
		return -1;
	case FP_TRUNCATE:
	case FP_CUT:
		send_all(c->p, *h->dst, b, n / 2);
		close_conn(c, r->act == FP_CUT);
		return -1;
	case FP_DUP:
		if (send_all(c->p, *h->dst, b, n))
			return -1;
		return send_all(c->p, *h->dst, b, n);
	case FP_DELAY:
		usleep(r->delay_ms * 1000u);
		return send_all(c->p, *h->dst, b, n);
	case FP_STALL:
		c->stalled = true;
		return 0;
	}
	return -1;
}

/* Takes what the source has; forwards each whole PDU.  -1: the connection ends. */
static int pump(struct fp_conn *c, struct fp_half *h)
{
	size_t off = 0;
	ssize_t k;

	if (h->cap - h->have < 4096) {
		uint8_t *nb = realloc(h->buf, h->cap * 2);

		if (!nb)
			return -1;
		h->buf = nb;
		h->cap *= 2;
	}
	k = recv(*h->src, h->buf + h->have, h->cap - h->have, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (k <= 0)
		return -1;
	if (c->stalled)
		return 0;
	h->have += (size_t)k;
	while (h->have - off >= sizeof(struct gdx_tcp_ch)) {
		struct gdx_tcp_ch ch;

		memcpy(&ch, h->buf + off, sizeof(ch));
		if (ch.plen < sizeof(ch) || ch.plen > FP_MAX_PDU) {
			/* not NVMe/TCP framing: the peers judge it, the proxy only passes it */
			if (send_all(c->p, *h->dst, h->buf + off, h->have - off))
				return -1;
			off = h->have;
			break;
		}
		if (h->have - off < ch.plen) {
			if (ch.plen > h->cap) {
				uint8_t *nb;

				memmove(h->buf, h->buf + off, h->have - off);
				h->have -= off;
				off = 0;
				nb = realloc(h->buf, ch.plen);
				if (!nb)
					return -1;
				h->buf = nb;
				h->cap = ch.plen;
			}
			break;
		}
		if (pdu(c, h, h->buf + off, ch.plen))
			return -1;
		off += ch.plen;
		if (c->stalled) {
			off = h->have;
			break;
		}
	}
	memmove(h->buf, h->buf + off, h->have - off);
	h->have -= off;
	return 0;
}

static void *conn_main(void *arg)
{
	struct fp_conn *c = arg;

	for (;;) {
		struct pollfd pfd[3] = {
			{ .fd = c->down, .events = POLLIN },
			{ .fd = c->up, .events = POLLIN },
			{ .fd = c->p->stop[0], .events = POLLIN },
		};
		int n = poll(pfd, 3, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || pfd[2].revents)
			break;
		if ((pfd[0].revents && pump(c, &c->half[FP_H2C])) ||
		    (c->down >= 0 && pfd[1].revents && pump(c, &c->half[FP_C2H])))
			break;
	}
	/* an end that closed gets its FIN passed on; a rule that reset has closed both */
	close_conn(c, false);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct fproxy *p = arg;

	while (!wait_fd(p, p->lfd, POLLIN)) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(p->tport),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		struct fp_conn *c;
		int one = 1, fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		int up;

		if (fd < 0)
			continue;
		up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (up < 0 || connect(up, (struct sockaddr *)&sa, sizeof(sa)) ||
		    p->nconns == FP_MAX_CONNS || !(c = calloc(1, sizeof(*c)))) {
			struct linger lg = { 1, 0 };

			/* the target is down: the host sees its connection reset */
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(fd);
			if (up >= 0)
				close(up);
			continue;
		}
		fcntl(up, F_SETFL, O_NONBLOCK);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->p = p;
		c->down = fd;
		c->up = up;
		c->half[FP_H2C] = (struct fp_half){ &c->down, &c->up, FP_H2C };
		c->half[FP_C2H] = (struct fp_half){ &c->up, &c->down, FP_C2H };
		for (int i = 0; i < 2; i++) {
			c->half[i].cap = 64 << 10;
			c->half[i].buf = malloc(c->half[i].cap);
		}
		pthread_mutex_lock(&p->lock);
		c->idx = p->nconns;
		p->conns[p->nconns++] = c;
		pthread_mutex_unlock(&p->lock);
		if (!c->half[0].buf || !c->half[1].buf ||
		    pthread_create(&c->thread, NULL, conn_main, c)) {
			fprintf(stderr, "fproxy: cannot serve connection %u\n", c->idx);
			abort();
		}
	}
	return NULL;
}

struct fproxy *fp_start(const char *target_port, const struct fp_rule *rules, unsigned n,
			char port[16])
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct fproxy *p;

	if (n > FP_MAX_RULES || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->tport = (unsigned short)atoi(target_port);
	memcpy(p->rules, rules, n * sizeof(*rules));
	p->nrules = n;
	pthread_mutex_init(&p->lock, NULL);
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->lfd < 0 || pipe2(p->stop, O_CLOEXEC) ||
	    bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(p->lfd, 64) ||
	    getsockname(p->lfd, (struct sockaddr *)&sa, &sl) ||
	    pthread_create(&p->thread, NULL, accept_main, p)) {
		perror("fproxy");
		abort();
	}
	snprintf(port, 16, "%u", ntohs(sa.sin_port));
	return p;
}

unsigned fp_fired(struct fproxy *p, unsigned i)
{
	unsigned n;

	pthread_mutex_lock(&p->lock);
	n = p->fired[i];
	pthread_mutex_unlock(&p->lock);
	return n;
}

unsigned fp_conns(struct fproxy *p)
{
	unsigned n;

	pthread_mutex_lock(&p->lock);
	n = p->nconns;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void fp_stop(struct fproxy *p)
{
	if (write(p->stop[1], "x", 1) != 1)
		abort();
	pthread_join(p->thread, NULL);
	for (unsigned i = 0; i < p->nconns; i++) {
		struct fp_conn *c = p->conns[i];

		pthread_join(c->thread, NULL);
		free(c->half[0].buf);
		free(c->half[1].buf);
		free(c);
	}
	close(p->lfd);
	close(p->stop[0]);
	close(p->stop[1]);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
