/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "common/config.h"

static int refuse(const char *prog, const char *opt, const char *s, const char *want)
{
	fprintf(stderr, "%s: %s '%s': want %s\n", prog, opt, s, want);
	return -EINVAL;
}

int arg_size(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
	     uint64_t *out)
{
	char want[96], lo[24], hi[24];
	uint64_t v;

	gdx_size_text(min, lo, sizeof(lo));
	gdx_size_text(max, hi, sizeof(hi));
	snprintf(want, sizeof(want), "a size from %s to %s (bytes, or with k, M, G or T)", lo, hi);
	if (gdx_parse_size(s, &v) || v < min || v > max)
		return refuse(prog, opt, s, want);
	*out = v;
	return 0;
}

int arg_count(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
	      uint64_t *out)
{
	char want[64], *end;
	unsigned long long v;

	snprintf(want, sizeof(want), "a whole number from %llu to %llu", (unsigned long long)min,
		 (unsigned long long)max);
	errno = 0;
	v = strtoull(s, &end, 10);
	/* strtoull takes "-1" for a huge number; only digits are a count */
	if (*s < '0' || *s > '9' || errno || *end || v < min || v > max)
		return refuse(prog, opt, s, want);
	*out = v;
	return 0;
}

int arg_secs(const char *prog, const char *opt, const char *s, double max, double *out)
{
	char want[64], *end;
	double v;

	snprintf(want, sizeof(want), "seconds above 0, at most %g", max);
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !(v > 0 && v <= max))
		return refuse(prog, opt, s, want);
	*out = v;
	return 0;
}

int arg_choice(const char *prog, const char *opt, const char *s, const char *choices)
{
	char want[128];
	size_t n = strlen(s);
	int i = 0;

	for (const char *c = choices; c; i++) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);

		if (len == n && !strncmp(c, s, n))
			return i;
		c = bar ? bar + 1 : NULL;
	}
	snprintf(want, sizeof(want), "one of %s", choices);
	return refuse(prog, opt, s, want);
}

int arg_gpu(const char *prog, const char *opt, const char *s, int *ordinal)
{
	char *end;
	long n;

	if (!strncmp(s, "gpu:", 4) && s[4] >= '0' && s[4] <= '9') {
		errno = 0;
		n = strtol(s + 4, &end, 10);
		if (!errno && !*end && n <= 1024) {
			*ordinal = (int)n;
			return 0;
		}
	}
	return refuse(prog, opt, s, "gpu:N (N from 0 to 1024)");
}

int arg_usage_error(const char *prog)
{
	fprintf(stderr, "Try '%s --help'.\n", prog);
	return 2;
}

int arg_secret(const char *prog, const char *opt, const char *s, char *out, size_t n)
{
	FILE *f;
	size_t len;

	if (!strncmp(s, "DHHC-1:", 7)) {
		if (strlen(s) >= n)
			goto bad;
		snprintf(out, n, "%s", s);
		return 0;
	}
	f = fopen(s, "re");
	if (!f) {
		fprintf(stderr, "%s: %s '%s': %s (want DHHC-1:hh:<base64>: or a file holding it)\n",
			prog, opt, s, strerror(errno));
		return -1;
	}
	len = fread(out, 1, n - 1, f);
	fclose(f);
	out[len] = 0;
	out[strcspn(out, " \t\r\n")] = 0;
	if (!strncmp(out, "DHHC-1:", 7) && len < n - 1)
		return 0;
	memset(out, 0, n);
	s = "the file";
bad:
	fprintf(stderr, "%s: %s: %s does not hold a secret as nvme gen-dhchap-key writes it "
		"(DHHC-1:hh:<base64>:)\n", prog, opt, s == out ? "the value" : s);
	return -1;
}
