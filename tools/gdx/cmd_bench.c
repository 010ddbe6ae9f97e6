/* SPDX-License-Identifier: MIT */
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
	if (argc >= 2) {
		for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
			if (!strcmp(argv[1], benches[i].name))
				return benches[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "usage: gdx bench <what> [options]\n\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(stderr, "  %-10s %s\n", benches[i].name, benches[i].summary);
	return 2;
}
