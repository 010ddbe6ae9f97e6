/* SPDX-License-Identifier: MIT */
/*
 * Prints what src/common/tls.c makes of a configured PSK, for test_tls_psk.py
 * to compare with its own computation:
 *   tls_psk_tool parse KEY                      -> "hmac len keyhex" or "error -N"
 *   tls_psk_tool psk KEY VERSION HOSTNQN SUBNQN -> identity, then the TLS PSK in hex
 *   tls_psk_tool lookup KEY IDENTITY            -> hostnqn, subnqn, TLS PSK, or "error -N"
 *   tls_psk_tool derive KEY LABEL IDENTITY      -> hash, then the PSK in hex (gdx_tls_psk_derive)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tls.h"

static void hex(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
	printf("\n");
}

int main(int argc, char **argv)
{
	struct gdx_tls_key k;
	struct gdx_tls_psk psk;
	char host[256], sub[256];
	int ret;

	if (argc < 3)
		return 2;
	ret = gdx_tls_key_parse(argv[2], &k);
	if (!ret && !strcmp(argv[1], "parse")) {
		printf("%u %u ", k.hmac, k.len);
		hex(k.key, k.len);
	} else if (!ret && !strcmp(argv[1], "psk") && argc == 6) {
		ret = gdx_tls_nvme_psk(&k, atoi(argv[3]), argv[4], argv[5], &psk);
		if (!ret) {
			printf("%s\n", psk.identity);
			hex(psk.key, psk.len);
		}
	} else if (!ret && !strcmp(argv[1], "lookup") && argc == 4) {
		ret = gdx_tls_nvme_lookup(&k, argv[3], &psk, host, sub);
		if (!ret) {
			printf("%s\n%s\n", host, sub);
			hex(psk.key, psk.len);
		}
	} else if (!ret && !strcmp(argv[1], "derive") && argc == 5) {
		ret = gdx_tls_psk_derive(&k, argv[3], argv[4], &psk);
		if (!ret) {
			printf("%u %s\n", psk.hash, psk.identity);
			hex(psk.key, psk.len);
		}
	} else if (!ret) {
		return 2;
	}
	if (ret)
		printf("error %d\n", ret);
	return 0;
}
