/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include <gdx/gdx.h>

#include "cmd.h"
#include "common/config.h"

static const struct gdx_cmd cmds[] = {
	{ "bench", "benchmarks with their ceilings (gdx bench file ...)", cmd_bench },
	{ "check", "readiness report: topology, drivers, limits and the path each source takes",
	  cmd_check },
	{ "config", "list every knob with its environment variable and current value", cmd_config },
	{ "cp", "copy between files and device memory (gpu:N), with speed and path", cmd_cp },
	{ "nvmf", "NVMe over Fabrics: target (and host) over TCP", cmd_nvmf },
	{ "version", "print the library version", cmd_version },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: gdx <command> [options]\n       gdx --version\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'gdx <command> --help' describes one command.\n");
}

int cmd_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("gdx %s\n", gdx_version());
	return 0;
}

int main(int argc, char **argv)
{
	char why[640], prog[32];

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version"))
		return cmd_version(argc - 1, argv + 1);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[1], cmds[i].name))
			continue;
		/* A typo in the environment or $GDX_CONFIG stops here, named; gdx config lists
		 * the values all the same and then says what is wrong. */
		if (cmds[i].run != cmd_config && cmds[i].run != cmd_version &&
		    gdx_config_check(why, sizeof(why))) {
			fprintf(stderr, "gdx: %s\n", why);
			return 1;
		}
		/* argv[0] of the command is its full name: getopt and args.c messages start so */
		snprintf(prog, sizeof(prog), "gdx %s", cmds[i].name);
		argv[1] = prog;
		return cmds[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "gdx: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
