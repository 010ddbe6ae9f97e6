/* SPDX-License-Identifier: MIT */
/*
 * TLS PSKs per host, as Linux's nvmet has them: it looks the PSK up in the
 * keyring by the identity the host offers, so each host NQN has a retained
 * PSK of its own.  Here a host entry's own configured key stands in for the
 * keyring, and the port's key is the default for hosts without one: a host
 * that has a key of its own is never let in with the port's, or the holder of
 * the shared key could claim its NQN.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmf/core/core.h"
#include "nvmf/core/internal.h"

static void host_psk_free(struct nvmf_host_psk *h)
{
	if (!h)
		return;
	gdx_tls_wipe(h, sizeof(*h));
	free(h);
}

int nvmf_tgt_set_host_psk(struct nvmf_tgt *t, const char *nqn, const struct gdx_tls_key *k)
{
	struct nvmf_host_psk *copy;
	unsigned i;
	int ret = 0;

	/* an identity separates its NQNs by spaces: an NQN with one could never be named */
	if (gdx_nvme_nqn_check(nqn, strlen(nqn) + 1) < 0 || strchr(nqn, ' ') || !k->len)
		return -EINVAL;
	copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	snprintf(copy->nqn, sizeof(copy->nqn), "%s", nqn);
	copy->key = *k;
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < t->nhpsk && strcmp(t->hpsk[i]->nqn, nqn); i++)
		;
	if (i < t->nhpsk) {
		host_psk_free(t->hpsk[i]);
		t->hpsk[i] = copy;
	} else if (t->nhpsk < NVMF_MAX_HOSTS) {
		t->hpsk[t->nhpsk++] = copy;
	} else {
		host_psk_free(copy);
		ret = -ENOSPC;
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void nvmf_host_psk_free_all(struct nvmf_tgt *t)
{
	for (unsigned i = 0; i < t->nhpsk; i++)
		host_psk_free(t->hpsk[i]);
	t->nhpsk = 0;
}

int nvmf_tls_psk_find(struct nvmf_tgt *t, const struct nvmf_port *p, const char *identity,
		      struct gdx_tls_psk *out, char *hostnqn, char *subnqn)
{
	struct gdx_tls_key k;
	unsigned i;
	int hash, ret = gdx_tls_nvme_identity(identity, &hash, hostnqn, subnqn);

	if (ret < 0)
		return ret;
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < t->nhpsk && strcmp(t->hpsk[i]->nqn, hostnqn); i++)
		;
	k = i < t->nhpsk ? t->hpsk[i]->key : p->tls_key;
	pthread_mutex_unlock(&t->lock);
	ret = k.len ? gdx_tls_nvme_lookup(&k, identity, out, hostnqn, subnqn) : -ENOKEY;
	gdx_tls_wipe(&k, sizeof(k));
	return ret;
}
