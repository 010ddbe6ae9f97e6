# SPDX-License-Identifier: MIT
"""gdx's exceptions: every failure of the library is a GdxError, an OSError.

A gdx call fails with a negative errno or with one of the library's own codes
(below -10000, see gdx/status.h).  For an errno the exception is also the
OSError subclass Python has for it (FileNotFoundError for ENOENT, ...), with
.errno set; for a library code .errno is None.  .status is the gdx code either way.
A command the NVMe controller failed carries its status (SCT << 8 | SC, as
nvme-cli prints it) in .nvme_status; None for every other failure.
"""
import errno as _errno

_E_BASE = -10000
_E_NVME_BASE = -20000  # GDX_E_NVME(status) = _E_NVME_BASE - status


class GdxError(OSError):
    """A libgdx call failed; .status is its (negative) gdx status code."""

    status = 0

    @property
    def nvme_status(self):
        """The NVMe status of a command the controller failed, else None."""
        s = _E_NVME_BASE - self.status
        return s if 0 <= s <= 0x7ff else None

    def __str__(self):
        if self.errno is not None:
            return super().__str__()
        # A library code: OSError would print "[Errno None]".
        text = "%s (gdx status %d)" % (self.strerror, self.status)
        return text if self.filename is None else "%s: %r" % (text, self.filename)


_by_errno = {
    _errno.ENOENT: FileNotFoundError,
    _errno.EEXIST: FileExistsError,
    _errno.EISDIR: IsADirectoryError,
    _errno.ENOTDIR: NotADirectoryError,
    _errno.EACCES: PermissionError,
    _errno.EPERM: PermissionError,
    _errno.EINTR: InterruptedError,
    _errno.ETIMEDOUT: TimeoutError,
    _errno.ECONNREFUSED: ConnectionRefusedError,
    _errno.ECONNRESET: ConnectionResetError,
    _errno.ECONNABORTED: ConnectionAbortedError,
    _errno.EPIPE: BrokenPipeError,
    _errno.EAGAIN: BlockingIOError,
}
_classes = {}


def _class_for(errno):
    base = _by_errno.get(errno)
    if base is None:
        return GdxError
    cls = _classes.get(base)
    if cls is None:
        cls = type("Gdx" + base.__name__, (GdxError, base), {"__module__": "gdx"})
        _classes[base] = cls
    return cls


def make(code, message, filename=None):
    """The exception for gdx status code (negative), as the extension raises it."""
    errno = -code if _E_BASE < code < 0 else None
    cls = _class_for(errno)
    if filename is None:
        exc = cls(errno, message)
    else:
        exc = cls(errno, message, filename)
    exc.status = code
    return exc
