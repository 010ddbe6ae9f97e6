/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOPO_INT_H
#define GDX_TOPO_INT_H

#include <stdint.h>
#include <sys/types.h>

#include <gdx/topo.h>

/* Internal view of a snapshot for gdx check: roots, PCI paths, config space. */

#define GDX_TOPO_MAX_DEPTH 16

/* snprintf that says -ENAMETOOLONG instead of truncating silently. */
int gdx_topo_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

const char *gdx_topo_sysfs_root(const struct gdx_topo *t);
const char *gdx_topo_procfs_root(const struct gdx_topo *t);

/*
 * Reads root/rel into buf (NUL-terminated, trailing newlines dropped).
 * Returns the length or a negative errno.
 */
int gdx_topo_read(const char *root, const char *rel, char *buf, size_t len);

/* gdx_topo_find_file() for a device number: what holds block device maj:min. */
int gdx_topo_find_devno(const struct gdx_topo *t, unsigned maj, unsigned min);

/* The host bridge ("pci0000:00") above device i; NULL when it is not on PCI. */
const char *gdx_topo_host_bridge(const struct gdx_topo *t, int i);

/*
 * The bridges a peer-to-peer transfer between devices i and j passes when both
 * sit below one host bridge and under a common bridge: those under the common
 * one on both sides, then the common one.  Returns their count (0 when the
 * path crosses a host bridge), or a negative errno.
 */
int gdx_topo_path_bridges(const struct gdx_topo *t, int i, int j, char (*out)[16], int max);

/*
 * Reads up to len bytes of the configuration space of PCI function bdf.  An
 * unprivileged reader gets only the first 64 bytes; the return value says how
 * many came back.
 */
ssize_t gdx_pci_config(const struct gdx_topo *t, const char *bdf, uint8_t *buf, size_t len);
/*
 * Offset of capability id in the standard list, 0 when absent, -ENODATA when
 * the bytes read do not reach far enough to tell.
 */
int gdx_pci_find_cap(const uint8_t *cfg, size_t len, uint8_t id);
/* Same for the extended capabilities (at 0x100 and above). */
int gdx_pci_find_ecap(const uint8_t *cfg, size_t len, uint16_t id);

#define GDX_PCI_CAP_EXP 0x10		/* PCI Express */
#define GDX_PCI_EXP_FLAGS 2
#define GDX_PCI_EXP_DEVCTL 8
#define GDX_PCI_EXP_DEVCTL_RELAX 0x0010
#define GDX_PCI_ECAP_ACS 0x000d
#define GDX_PCI_ACS_CTRL 6
#define GDX_PCI_ACS_RR 0x0004		/* P2P request redirect */
#define GDX_PCI_ACS_CR 0x0008		/* P2P completion redirect */
#define GDX_PCI_ACS_EC 0x0020		/* P2P egress control */

#endif
