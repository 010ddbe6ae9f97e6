/* SPDX-License-Identifier: MIT */
/*
 * Where the bytes of a loopback tcp connection wait while the transport
 * moves them (`gdx bench xport --sockets`): a thread samples both ends'
 * sockets, those of the bench's own client and server, every few tens of
 * microseconds and files each sample under the first that holds:
 *
 *   SW_SERVER_UNREAD  the server's socket holds bytes its receive side has
 *                     not read (for write and send: the data)
 *   SW_UNSENT         an end holds bytes TCP has not sent yet (window)
 *   SW_CLIENT_UNREAD  the client's socket holds bytes not read (for write
 *                     and send: the answers; for read: the data)
 *   SW_WINDOW_FULL    neither socket holds any, and the bench has its whole
 *                     depth in flight: the answers are on their way
 *                     through the threads of one end or the other
 *   SW_IDLE           neither, and the bench has room to post
 *
 * A transport at the socket's speed keeps the receiving end's socket from
 * running dry; the shares say which hand-off leaves it so.
 */
#ifndef GDX_BENCH_SOCKWATCH_H
#define GDX_BENCH_SOCKWATCH_H

#include <stdint.h>

enum { SW_SERVER_UNREAD, SW_UNSENT, SW_CLIENT_UNREAD, SW_WINDOW_FULL, SW_IDLE, SW_NCLASS };

struct sockwatch_tally {
	uint64_t samples, n[SW_NCLASS];
};

struct sockwatch;

/*
 * Starts sampling the connection from the client to the listener on
 * loopback port lport, both of whose ends this process holds.  *inflight
 * (read atomically) is the bench's requests in flight, depth its most.
 * -ENOENT when no such pair of sockets is open here.
 */
int sockwatch_start(struct sockwatch **w, unsigned lport, const unsigned *inflight,
		    unsigned depth);

/* Stops the sampling and adds its samples to *t; frees w. */
void sockwatch_stop(struct sockwatch *w, struct sockwatch_tally *t);

#endif
