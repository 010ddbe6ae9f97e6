/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include "common/util.h"
#include "progress.h"

void tool_progress_draw(uint64_t done, uint64_t total, uint64_t t0, uint64_t *last_draw,
			bool final)
{
	uint64_t now = gdx_now_ns();
	double s = (double)(now - t0) / 1e9;
	int w = 30, fill;

	if (!final && now - *last_draw < 100000000ull)
		return;
	*last_draw = now;
	fill = total ? (int)((double)done / (double)total * w) : w;
	fprintf(stderr, "\r[%.*s%*s] %5.1f%% %8.2f MiB %7.2f GB/s", fill,
		"##############################", w - fill, "",
		total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1048576.0,
		s > 0 ? (double)done / s / 1e9 : 0.0);
	if (final)
		fputc('\n', stderr);
}
