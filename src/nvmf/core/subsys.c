/* SPDX-License-Identifier: MIT */
/* Subsystems, their namespaces and allowed hosts, and the ports that expose them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/core.h"
#include "nvmf/core/internal.h"

int nvmf_tgt_init(struct nvmf_tgt *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	snprintf(t->disc.nqn, sizeof(t->disc.nqn), "%s", GDX_NVME_DISC_NQN);
	t->disc.discovery = true;
	t->disc.allow_any_host = true;
	snprintf(t->disc.serial, sizeof(t->disc.serial), "gdx-discovery");
	snprintf(t->disc.model, sizeof(t->disc.model), "gdx discovery");
	/*
	 * Controller IDs start at a random point: sequential IDs from 1 make
	 * another host's controller easy to name in an I/O-queue Connect.
	 */
	if (getrandom(&t->next_cntlid, sizeof(t->next_cntlid), 0) != sizeof(t->next_cntlid))
		t->next_cntlid = (uint16_t)getpid();
	t->next_cntlid = (uint16_t)(t->next_cntlid % GDX_NVME_CNTLID_MAX + 1);
	t->disc_genctr = 1;
	t->max_io = 1u << 20;
	t->inline_data = 16384;
	t->max_io_queues = 64;
	t->max_qdepth = 256;
	t->auth_tmo_ns = 30000000000ull;
	return 0;
}

static void ns_free(struct nvmf_ns *ns)
{
	if (ns->ops)
		ns->ops->close(ns);
	gdx_stats_destroy(ns->stats);
	free(ns);
}

void nvmf_tgt_fini(struct nvmf_tgt *t)
{
	for (unsigned i = 0; i < t->nsubsys; i++) {
		struct nvmf_subsys *s = t->subsys[i];

		for (uint32_t n = 0; n < s->max_nsid; n++)
			if (s->ns[n])
				ns_free(s->ns[n]);
		for (unsigned h = 0; h < s->nhosts; h++)
			free(s->hosts[h]);
		free(s);
	}
	t->nsubsys = 0;
	for (unsigned i = 0; i < t->nhauth; i++)
		nvmf_host_auth_free(t->hauth[i]);
	t->nhauth = 0;
	nvmf_host_psk_free_all(t);
	for (unsigned i = 0; i < t->nports; i++)
		gdx_tls_wipe(&t->ports[i].tls_key, sizeof(t->ports[i].tls_key));
	pthread_mutex_destroy(&t->lock);
}

struct nvmf_subsys *nvmf_subsys_find(struct nvmf_tgt *t, const char *nqn)
{
	if (!strcmp(nqn, t->disc.nqn))
		return &t->disc;
	for (unsigned i = 0; i < t->nsubsys; i++)
		if (!strcmp(t->subsys[i]->nqn, nqn))
			return t->subsys[i];
	return NULL;
}

/* FNV-1a over the NQN: seeds the serial number and namespace IDs. */
static uint64_t nqn_hash(const char *s, uint64_t salt)
{
	uint64_t h = 0xcbf29ce484222325ull ^ salt;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int nvmf_subsys_add(struct nvmf_tgt *t, const char *nqn, struct nvmf_subsys **out)
{
	struct nvmf_subsys *s;
	int ret = 0;

	if (gdx_nvme_nqn_check(nqn, strlen(nqn) + 1) < 0 || !strcmp(nqn, GDX_NVME_DISC_NQN))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (nvmf_subsys_find(t, nqn)) {
		ret = -EEXIST;
		goto out;
	}
	if (t->nsubsys == NVMF_MAX_SUBSYS) {
		ret = -ENOSPC;
		goto out;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(s->nqn, sizeof(s->nqn), "%s", nqn);
	snprintf(s->serial, sizeof(s->serial), "%016llx",
		 (unsigned long long)nqn_hash(nqn, 0));
	snprintf(s->model, sizeof(s->model), "gdx");
	t->subsys[t->nsubsys++] = s;
	t->disc_genctr++;
	*out = s;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int nvmf_subsys_add_host(struct nvmf_subsys *s, const char *hostnqn)
{
	if (gdx_nvme_nqn_check(hostnqn, strlen(hostnqn) + 1) < 0)
		return -EINVAL;
	if (s->nhosts == NVMF_MAX_HOSTS)
		return -ENOSPC;
	s->hosts[s->nhosts] = strdup(hostnqn);
	if (!s->hosts[s->nhosts])
		return -ENOMEM;
	s->nhosts++;
	return 0;
}

bool nvmf_host_allowed(const struct nvmf_subsys *s, const char *hostnqn)
{
	if (s->allow_any_host)
		return true;
	for (unsigned i = 0; i < s->nhosts; i++)
		if (!strcmp(s->hosts[i], hostnqn))
			return true;
	return false;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * Namespace IDs derive from (subsystem NQN, NSID) so they survive restarts and
 * differ across subsystems: the Linux host drops namespaces whose IDs collide
 * or change.
 */
static void ns_make_ids(struct nvmf_ns *ns, const char *nqn)
{
	uint64_t a = mix(nqn_hash(nqn, 1) ^ ns->nsid), b = mix(a ^ 0x5bd1e995);

	if (all_zero(ns->nguid, 16)) {
		memcpy(ns->nguid, &a, 8);
		memcpy(ns->nguid + 8, &b, 8);
	}
	if (all_zero(ns->uuid, 16)) {
		uint64_t c = mix(b), d = mix(c);

		memcpy(ns->uuid, &c, 8);
		memcpy(ns->uuid + 8, &d, 8);
		ns->uuid[6] = (ns->uuid[6] & 0x0f) | 0x80;	/* version 8: custom */
		ns->uuid[8] = (ns->uuid[8] & 0x3f) | 0x80;	/* RFC 4122 variant */
	}
	uint64_t e = mix(a ^ b);

	memcpy(ns->eui64, &e, 8);
	ns->eui64[0] = (uint8_t)((ns->eui64[0] & ~1u) | 2u);	/* locally administered */
}

int nvmf_subsys_add_ns(struct nvmf_tgt *t, struct nvmf_subsys *s, uint32_t nsid,
		       const char *spec, uint32_t block_size, const uint8_t *nguid,
		       const uint8_t *uuid)
{
	struct nvmf_ns *ns;
	char name[GDX_NVME_NQN_SIZE + 32];
	int ret;

	if (s->discovery || nsid == 0 || nsid > NVMF_MAX_NS)
		return -EINVAL;
	if (block_size != 512 && block_size != 4096)
		return -EINVAL;
	if (s->ns[nsid - 1])
		return -EEXIST;
	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	ns->nsid = nsid;
	ns->lba_shift = block_size == 4096 ? 12 : 9;
	snprintf(ns->spec, sizeof(ns->spec), "%s", spec);
	if (nguid)
		memcpy(ns->nguid, nguid, 16);
	if (uuid)
		memcpy(ns->uuid, uuid, 16);
	ns_make_ids(ns, s->nqn);
	ns->ops = nvmf_ns_backend(spec);
	ret = ns->ops->open(ns, spec);
	if (ret) {
		GDX_ERR("nvmf", "namespace %u of %s: cannot open '%s': %s", nsid, s->nqn, spec,
			gdx_strerror(ret));
		ns->ops = NULL;
		ns_free(ns);
		return ret;
	}
	ns->nsze = ns->size >> ns->lba_shift;
	if (!ns->nsze) {
		GDX_ERR("nvmf", "namespace %u of %s: '%s' is smaller than one block", nsid, s->nqn,
			spec);
		ns_free(ns);
		return -EINVAL;
	}
	static const char *const names[] = { "reads", "writes", "read_bytes", "write_bytes",
					     "flushes", "errors" };
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(ns->ctr); i++)
		ns->ctr[i].name = names[i];
	snprintf(name, sizeof(name), "nvmf.ns.%s.%u", s->nqn, nsid);
	gdx_stats_create(name, ns->ctr, GDX_ARRAY_SIZE(ns->ctr), &ns->stats);
	ns->enabled = true;
	pthread_mutex_lock(&t->lock);
	s->ns[nsid - 1] = ns;
	if (nsid > s->max_nsid)
		s->max_nsid = nsid;
	pthread_mutex_unlock(&t->lock);
	GDX_INFO("nvmf", "subsystem %s: namespace %u on %s (%s, %llu blocks of %u bytes)", s->nqn,
		 nsid, spec, ns->ops->name, (unsigned long long)ns->nsze, block_size);
	nvmf_subsys_ns_changed(t, s, nsid);
	return 0;
}

struct nvmf_port *nvmf_port_find(struct nvmf_tgt *t, uint16_t portid)
{
	for (unsigned i = 0; i < t->nports; i++)
		if (t->ports[i].portid == portid)
			return &t->ports[i];
	return NULL;
}

int nvmf_port_add(struct nvmf_tgt *t, uint16_t portid, uint8_t trtype, const char *traddr,
		  const char *trsvcid, struct nvmf_port **out)
{
	struct nvmf_port *p;

	if (t->nports == NVMF_MAX_PORTS)
		return -ENOSPC;
	if (nvmf_port_find(t, portid))
		return -EEXIST;
	if (strlen(traddr) >= sizeof(p->traddr) || strlen(trsvcid) >= sizeof(p->trsvcid))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	p = &t->ports[t->nports++];
	memset(p, 0, sizeof(*p));
	p->portid = portid;
	p->trtype = trtype;
	p->adrfam = strchr(traddr, ':') ? GDX_NVMF_ADRFAM_IPV6 : GDX_NVMF_ADRFAM_IPV4;
	snprintf(p->traddr, sizeof(p->traddr), "%s", traddr);
	snprintf(p->trsvcid, sizeof(p->trsvcid), "%s", trsvcid);
	t->disc_genctr++;
	pthread_mutex_unlock(&t->lock);
	*out = p;
	return 0;
}

int nvmf_port_link(struct nvmf_tgt *t, struct nvmf_port *p, struct nvmf_subsys *s)
{
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	for (unsigned i = 0; i < p->nsubsys; i++)
		if (p->subsys[i] == s)
			goto out;
	if (p->nsubsys == NVMF_MAX_SUBSYS) {
		ret = -ENOSPC;
		goto out;
	}
	p->subsys[p->nsubsys++] = s;
	t->disc_genctr++;
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}
