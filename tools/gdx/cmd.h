/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOOL_CMD_H
#define GDX_TOOL_CMD_H

/*
 * Each subcommand lives in its own cmd_<name>.c and returns a process exit
 * code: 0 success, 1 failure, 2 usage error.
 */
struct gdx_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);	/* argv[0] is the subcommand */
};

int cmd_bench(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_nvmf(int argc, char **argv);
int cmd_version(int argc, char **argv);

struct gdx_device;
/* gpu:N -> device N of the kind the device knob selects (cuda, or emulated). */
int tool_open_gpu(int ordinal, struct gdx_device **dev);

#endif
