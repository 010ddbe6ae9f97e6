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

int cmd_check(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_version(int argc, char **argv);

#endif
