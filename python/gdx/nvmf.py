# SPDX-License-Identifier: MIT
"""NVMe over Fabrics (TCP) from Python: discovery, and a host whose namespaces
read into and write from any memory gdx.File takes.

    for e in gdx.nvmf.discover("10.0.0.2", 4420):
        print(e["subnqn"], e["traddr"], e["trsvcid"])
    with gdx.nvmf.Host("10.0.0.2", 4420, "nqn.2024-01.io.example:ssd", device="cuda:0") as h:
        print(h.identify()["mn"], h.identify_ns(1)["size"])
        h.read_into(tensor, offset=0)           # GPU memory, through a pinned bounce ring

The library keeps the controller alive, reconnects and resubmits by itself
(docs/nvmf-host.md); its knobs are nvmf.host.* (gdx.config).  Offsets and
sizes are in bytes and must be whole blocks of the namespace.
"""
from . import _gdx, driver as _driver

DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"


def discover(addr, port=8009, *, hostnqn=None, transport="tcp"):
    """The discovery log of the discovery controller at addr:port, as dicts
    (subnqn, traddr, trsvcid, trtype, adrfam, subtype, portid, cntlid, ...)."""
    return _gdx.nvmf_discover(addr, port, hostnqn, _transport(transport))


def _transport(transport):
    if transport not in ("tcp", "rdma"):
        raise ValueError("transport %r: gdx's NVMe-oF host speaks tcp and rdma" % (transport,))
    return transport


class Host:
    """A controller of subsystem nqn at addr:port.

    transport: "tcp" or "rdma".  device:
    the device whose memory transfers go to (see gdx.driver()); None for host
    memory only.
    hostnqn: None for /etc/nvme/hostnqn, else one made from the host ID.
    dhchap_secret: the DH-HMAC-CHAP secret ("DHHC-1:hh:<base64>:", as `nvme
    gen-dhchap-key` writes it) to answer a controller that asks for
    authentication; dhchap_ctrl_secret: the controller's, which it must then
    prove it holds (bidirectional).  A refusal raises PermissionError.
    """

    def __init__(self, addr, port, nqn, transport="tcp", *, device=None, hostnqn=None,
                 dhchap_secret=None, dhchap_ctrl_secret=None):
        self._h = _gdx.NvmfHost(addr, port, nqn,
                                None if device is None else _driver(device), hostnqn,
                                _transport(transport), dhchap_secret, dhchap_ctrl_secret)

    def read_into(self, buf, offset=0, size=None, *, nsid=1):
        """Reads size bytes (default: all of buf) at byte offset of namespace nsid."""
        return self._h.read_into(buf, offset, size, nsid)

    def write_from(self, buf, offset=0, size=None, *, nsid=1):
        """Writes size bytes (default: all of buf) at byte offset of namespace nsid."""
        return self._h.write_from(buf, offset, size, nsid)

    def identify(self):
        """Identify Controller and the connection's settings, as a dict."""
        return self._h.identify()

    def identify_ns(self, nsid=1):
        """Identify Namespace as a dict (nsze in blocks, block_size, size in bytes)."""
        return self._h.identify_ns(nsid)

    def namespaces(self):
        """The active namespace IDs."""
        return self._h.ns_list()

    def flush(self, nsid=1):
        self._h.flush(nsid)

    @property
    def state(self):
        """"live", "reconnecting", "failed" (gave up) or "closed"."""
        return self._h.state

    @property
    def last_path(self):
        """The last transfer's path: "direct" (host memory, straight from the socket),
        "bounce" (device memory, through pinned staging) or "none"."""
        return self._h.last_path

    def close(self):
        """Disconnects (shutting the controller down)."""
        self._h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
