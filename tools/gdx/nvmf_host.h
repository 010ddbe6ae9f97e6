/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOOL_NVMF_HOST_H
#define GDX_TOOL_NVMF_HOST_H

/* `gdx nvmf` host subcommands (argv[0] is the subcommand name). */
int cmd_nvmf_discover(int argc, char **argv);
int cmd_nvmf_id_ctrl(int argc, char **argv);
int cmd_nvmf_id_ns(int argc, char **argv);
int cmd_nvmf_read(int argc, char **argv);
int cmd_nvmf_write(int argc, char **argv);

#endif
