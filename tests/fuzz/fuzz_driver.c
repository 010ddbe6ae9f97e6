/* SPDX-License-Identifier: MIT */
/*
 * Stand-in for libFuzzer where the compiler has none (gcc builds): runs the
 * target on every file named on the command line, then on GDX_FUZZ_RUNS
 * (default 20000) pseudo-random mutations of them, so CI still drives the
 * parser with garbage.  With clang the real libFuzzer main is linked instead.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	static uint8_t seeds[16][8192];
	size_t seed_len[16] = { 0 };
	int nseeds = 0;
	const char *r = getenv("GDX_FUZZ_RUNS");
	long runs = r ? atol(r) : 20000;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	uint8_t buf[8192];

	for (int i = 1; i < argc && nseeds < 16; i++) {
		FILE *f = fopen(argv[i], "rb");

		if (!f) {
			perror(argv[i]);
			return 1;
		}
		seed_len[nseeds] = fread(seeds[nseeds], 1, sizeof(seeds[0]), f);
		fclose(f);
		LLVMFuzzerTestOneInput(seeds[nseeds], seed_len[nseeds]);
		nseeds++;
	}
	for (long n = 0; n < runs; n++) {
		size_t len;

		if (nseeds && (rnd(&s) & 3)) {
			int k = (int)(rnd(&s) % (uint64_t)nseeds);

			len = seed_len[k];
			memcpy(buf, seeds[k], len);
			for (int m = (int)(rnd(&s) % 8) + 1; m > 0 && len; m--)
				buf[rnd(&s) % len] = (uint8_t)rnd(&s);
			if (rnd(&s) % 4 == 0)
				len = (size_t)(rnd(&s) % (len + 1));
		} else {
			len = (size_t)(rnd(&s) % 512);
			for (size_t i = 0; i < len; i++)
				buf[i] = (uint8_t)rnd(&s);
		}
		LLVMFuzzerTestOneInput(buf, len);
	}
	printf("%ld inputs, %d seeds: no crash\n", runs, nseeds);
	return 0;
}
