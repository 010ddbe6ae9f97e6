/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the registration cache driven by a byte string of
 * operations (insert, remove, lookup, lookup-and-hold, put, notify) on a small
 * arena, checked after every step against a byte-per-byte model: every answer,
 * every payload, and that each entry is released exactly once and only after
 * its last holder put it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/regcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA 512
#define MAX_IDS 4096
#define MAX_HELD 4

static char arena[ARENA];

struct model {
	int owner[ARENA];		/* entry id covering the byte, 0 if none */
	int start[MAX_IDS], len[MAX_IDS];
	bool live[MAX_IDS];		/* in the cache */
	int holds[MAX_IDS];		/* references the test holds */
	bool released[MAX_IDS];
	int next_id;
};

static struct model m;

#define CHECK(c)                                                              \
	do {                                                                  \
		if (!(c)) {                                                   \
			fprintf(stderr, "regcache model mismatch: %s (line %d)\n", \
				#c, __LINE__);                                \
			abort();                                              \
		}                                                             \
	} while (0)

static void on_release(struct gdx_reg *r, void *arg)
{
	int id = (int)(intptr_t)r->payload;

	(void)arg;
	CHECK(id > 0 && id < MAX_IDS);
	CHECK(!m.released[id]);
	CHECK(!m.live[id] && m.holds[id] == 0);
	m.released[id] = true;
}

static void model_drop(int id)
{
	for (int i = m.start[id]; i < m.start[id] + m.len[id]; i++)
		m.owner[i] = 0;
	m.live[id] = false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gdx_reg *held[MAX_HELD] = { 0 };
	struct gdx_regcache *rc;
	size_t pos = 0;
	int nlive = 0;

	memset(&m, 0, sizeof(m));
	m.next_id = 1;
	if (gdx_regcache_create(NULL, on_release, NULL, &rc))
		abort();
	while (size - pos >= 3 && m.next_id < MAX_IDS) {
		int op = data[pos] % 6, a = (data[pos + 1] | (data[pos] & 0x80) << 1) % ARENA;
		int n = data[pos + 2] % 64;
		struct gdx_reg *r;
		int ret, id;

		pos += 3;
		switch (op) {
		case 0: {	/* insert [a, a+n) */
			bool free_run = n > 0 && a + n <= ARENA;

			for (int i = a; free_run && i < a + n; i++)
				free_run = !m.owner[i];
			id = m.next_id;
			if (a + n > ARENA)
				break;	/* outside the arena: not ours to register */
			ret = gdx_regcache_insert(rc, arena + a, (size_t)n, (void *)(intptr_t)id,
						  NULL);
			CHECK(ret == (n == 0 ? -EINVAL : free_run ? 0 : -EEXIST));
			if (!ret) {
				m.next_id++;
				m.start[id] = a;
				m.len[id] = n;
				m.live[id] = true;
				for (int i = a; i < a + n; i++)
					m.owner[i] = id;
				nlive++;
			}
			break;
		}
		case 1:		/* remove the entry starting at a */
			id = m.owner[a];
			/* The model changes first: the release callback checks it. */
			if (id && m.start[id] == a) {
				model_drop(id);
				nlive--;
				CHECK(gdx_regcache_remove(rc, arena + a) == 0);
			} else {
				CHECK(gdx_regcache_remove(rc, arena + a) == -ENOENT);
			}
			break;
		case 2:		/* lookup [a, a+n) */
		case 3: {	/* ... and hold the reference */
			bool hit;

			if (!n || a + n > ARENA)
				break;
			id = m.owner[a];
			hit = id && a + n <= m.start[id] + m.len[id];
			ret = gdx_regcache_lookup(rc, arena + a, (size_t)n, &r);
			CHECK(ret == (hit ? 0 : -ENOENT));
			if (ret)
				break;
			CHECK((int)(intptr_t)r->payload == id);
			CHECK(r->start == (uintptr_t)(arena + m.start[id]));
			CHECK(r->len == (size_t)m.len[id]);
			if (op == 3 && !held[n % MAX_HELD]) {
				held[n % MAX_HELD] = r;
				m.holds[id]++;
			} else {
				gdx_regcache_put(rc, r);
			}
			break;
		}
		case 4:		/* put a held reference */
			r = held[n % MAX_HELD];
			if (!r)
				break;
			held[n % MAX_HELD] = NULL;
			id = (int)(intptr_t)r->payload;
			m.holds[id]--;
			gdx_regcache_put(rc, r);
			break;
		case 5:		/* notify [a, a+n) released */
			for (int i = a; i < a + n && i < ARENA; i++) {
				id = m.owner[i];
				if (id) {
					model_drop(id);
					nlive--;
				}
			}
			gdx_mem_notify_release(arena + a, (size_t)n);
			break;
		}
		CHECK(gdx_regcache_count(rc) == (size_t)nlive);
		/* Dropped entries are released exactly when nobody holds them. */
		for (id = 1; id < m.next_id; id++)
			CHECK(m.released[id] == (!m.live[id] && !m.holds[id]));
	}
	for (int i = 0; i < MAX_HELD; i++) {
		if (held[i]) {
			m.holds[(int)(intptr_t)held[i]->payload]--;
			gdx_regcache_put(rc, held[i]);
		}
	}
	for (int id = 1; id < m.next_id; id++)
		m.live[id] = false;
	gdx_regcache_destroy(rc);
	for (int id = 1; id < m.next_id; id++)
		CHECK(m.released[id]);
	return 0;
}
