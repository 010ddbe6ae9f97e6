/* SPDX-License-Identifier: MIT */
/*
 * The DH-HMAC-CHAP crypto of src/nvmf/auth as a line protocol, for
 * test_nvmf_auth_kat.py, which computes the same values independently
 * (hashlib, hmac, Python integers) and compares.  One request per line,
 * one answer line each ("error" when the call fails):
 *   key SECRET                          -> HH LEN KEYHEX
 *   transform SECRET NQN                -> HEX
 *   augment HASH SKEYHEX CHALHEX        -> HEX
 *   response HASH TKEYHEX CHALHEX SEQ TID CTRL HOSTNQN SUBNQN -> HEX
 *   dh GROUP PEERHEX                    -> OURPUBHEX SESSIONKEYHEX
 *   lists HASHES DHS                    -> the ids of each list
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmf/auth/auth.h"

static size_t unhex(const char *s, uint8_t *out, size_t max)
{
	size_t n = strlen(s) / 2;

	if (n > max)
		return (size_t)-1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return (size_t)-1;
		out[i] = (uint8_t)v;
	}
	return n;
}

static void hex(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

static int one(char **a, int n)
{
	static uint8_t x[NVMF_AUTH_DH_MAX], y[NVMF_AUTH_DH_MAX], out[NVMF_AUTH_DH_MAX];
	struct nvmf_auth_key k;
	int ret;

	if (!strcmp(a[0], "key") && n == 2) {
		if (nvmf_auth_key_parse(a[1], &k))
			return -1;
		printf("%u %u ", k.hash, k.len);
		hex(k.key, k.len);
	} else if (!strcmp(a[0], "transform") && n == 3) {
		if (nvmf_auth_key_parse(a[1], &k) || (ret = nvmf_auth_transform(&k, a[2], out)) < 0)
			return -1;
		hex(out, (size_t)ret);
	} else if (!strcmp(a[0], "augment") && n == 4) {
		size_t sl = unhex(a[2], x, sizeof(x));

		if (sl == (size_t)-1 || unhex(a[3], y, sizeof(y)) == (size_t)-1 ||
		    (ret = nvmf_auth_augment((uint8_t)atoi(a[1]), x, sl, y, out)) < 0)
			return -1;
		hex(out, (size_t)ret);
	} else if (!strcmp(a[0], "response") && n == 9) {
		size_t tl = unhex(a[2], x, sizeof(x));

		if (tl == (size_t)-1 || unhex(a[3], y, sizeof(y)) == (size_t)-1 ||
		    (ret = nvmf_auth_response((uint8_t)atoi(a[1]), x, tl, y,
					      (uint32_t)strtoul(a[4], NULL, 0),
					      (uint16_t)strtoul(a[5], NULL, 0), 0, atoi(a[6]) != 0,
					      a[7], a[8], out)) < 0)
			return -1;
		hex(out, (size_t)ret);
	} else if (!strcmp(a[0], "dh") && n == 3) {
		struct nvmf_auth_dh *dh;
		size_t pl = unhex(a[2], x, sizeof(x));
		int len;

		if (pl == (size_t)-1 || nvmf_auth_dh_new((uint8_t)atoi(a[1]), &dh))
			return -1;
		len = nvmf_auth_dh_public(dh, y);
		ret = len < 0 ? len : nvmf_auth_dh_derive(dh, x, pl, out);
		nvmf_auth_dh_free(dh);
		if (ret < 0)
			return -1;
		hex(y, (size_t)len);
		printf(" ");
		hex(out, (size_t)ret);
	} else if (!strcmp(a[0], "lists") && n == 3) {
		uint8_t ids[8];
		int nh = nvmf_auth_hash_list(a[1], ids, 3), nd;

		if (nh < 0)
			return -1;
		for (int i = 0; i < nh; i++)
			printf("%u", ids[i]);
		nd = nvmf_auth_dh_list(a[2], ids, 6);
		if (nd < 0)
			return -1;
		printf(" ");
		for (int i = 0; i < nd; i++)
			printf("%u", ids[i]);
	} else {
		return -1;
	}
	return 0;
}

int main(void)
{
	static char line[8192];

	while (fgets(line, sizeof(line), stdin)) {
		char *a[10], *save = NULL;
		int n = 0;

		for (char *t = strtok_r(line, " \n", &save); t && n < 10;
		     t = strtok_r(NULL, " \n", &save))
			a[n++] = t;
		if (!n || one(a, n))
			printf("error");
		printf("\n");
		fflush(stdout);
	}
	return 0;
}
