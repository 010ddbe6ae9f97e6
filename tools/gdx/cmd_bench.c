/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench_file.h"
#include "bench_nvmf_host.h"
#include "bench_xport.h"
#include "cmd.h"

static int bench_file(int argc, char **argv)
{
	return gdx_bench_file(argc, argv, tool_open_gpu);
}

static int bench_xport(int argc, char **argv)
{
	return gdx_bench_xport(argc, argv, tool_open_gpu);
}

static int bench_nvmf_host(int argc, char **argv)
{
	return gdx_bench_nvmf_host(argc, argv, tool_open_gpu);
}

static const struct {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
} benches[] = {
	{ "file", "file <-> device memory against storage, copy and naive ceilings", bench_file },
	{ "xport", "transport bandwidth/latency by size against raw TCP or perftest", bench_xport },
	{ "nvmf-host", "NVMe/TCP host reads into host/device memory vs TCP and kernel-host ceilings",
	  bench_nvmf_host },
};

/* `gdx bench <what> ...`: each benchmark prints its result beside its ceilings. */
int cmd_bench(int argc, char **argv)
{
	bool help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
	FILE *f = help ? stdout : stderr;
	char prog[32];

	for (size_t i = 0; argc >= 2 && i < sizeof(benches) / sizeof(benches[0]); i++) {
		if (strcmp(argv[1], benches[i].name))
			continue;
		snprintf(prog, sizeof(prog), "gdx bench %s", benches[i].name);
		argv[1] = prog;
		return benches[i].run(argc - 1, argv + 1);
	}
	if (argc >= 2 && !help)
		fprintf(stderr, "gdx bench: unknown benchmark '%s'\n", argv[1]);
	fprintf(f, "usage: gdx bench <what> [options]\n\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].summary);
	fprintf(f, "\n'gdx bench <what> --help' describes one.\n");
	return help ? 0 : 2;
}
