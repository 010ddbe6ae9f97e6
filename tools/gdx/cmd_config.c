/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include <gdx/gdx.h>

#include "cmd.h"
#include "common/config.h"

/* `gdx config [--markdown]`: the knob table, as text or as docs/config.md's table. */
int cmd_config(int argc, char **argv)
{
	struct gdx_config_knob_info k;
	int markdown = argc == 2 && !strcmp(argv[1], "--markdown");
	int n = gdx_config_knob(0, NULL);
	char why[640];

	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: gdx config [--markdown]\n"
		       "  every knob: its name, environment variable, type, current value and "
		       "meaning\n"
		       "  --markdown  the table of docs/config.md, with the defaults\n");
		return 0;
	}
	if (argc > 1 && !markdown) {
		fprintf(stderr, "%s: unknown argument '%s'\nusage: gdx config [--markdown]\n",
			argv[0], argv[1]);
		return 2;
	}
	if (markdown)
		printf("| knob | environment | type | default | meaning |\n|---|---|---|---|---|\n");
	else
		printf("%-24s %-28s %-7s %-10s %s\n", "KNOB", "ENVIRONMENT", "TYPE", "VALUE",
		       "MEANING");
	for (int i = 0; i < n; i++) {
		char cur[256];

		gdx_config_knob((unsigned)i, &k);
		if (markdown) {
			printf("| `%s` | `%s` | %s | `%s` | %s |\n", k.name, k.env, k.type, k.def, k.doc);
			continue;
		}
		if (gdx_config_get(k.name, cur, sizeof(cur)) < 0)
			snprintf(cur, sizeof(cur), "?");
		printf("%-24s %-28s %-7s %-10s %s\n", k.name, k.env, k.type, cur, k.doc);
	}
	if (gdx_config_check(why, sizeof(why))) {
		fprintf(stderr, "%s: %s\n", argv[0], why);
		return 1;
	}
	return 0;
}
