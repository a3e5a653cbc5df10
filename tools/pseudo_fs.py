"""Whether an open descriptor lives on a kernel pseudo file system (``/proc``, ``/sys``…).

A file there looks like a regular file to ``fstat`` (``S_ISREG``, often of size 0), but reading
it is a call into the kernel: ``/proc/kmsg`` blocks its reader forever, ``/proc/self/environ``
hands out the process's secrets, a ``/sys``, debugfs or tracefs attribute may act when read.
Every reader of a named file (``patterns FILE``, a log-folder hour file, a runbook) asks
:func:`pseudo_filesystem` on the descriptor it opened, before it reads a byte. The answer is about
the descriptor, not the path: a symbolic link in a directory component (``dir-link/status``
where ``dir-link`` leads to ``/proc/self``), a bind mount, or a descriptor handed over as
standard input (``sre-diag patterns < /proc/kmsg``) all end on the same descriptor, and a link
to a normal disk (``/var/log`` a link to ``/data/log``) stays usable.

How it tells, in this order:

1. ``fstatfs(2)`` on the descriptor, through ``ctypes`` (Python has no ``os.fstatfs``): the
   ``f_type`` magic number of the superblock behind it (the values of ``<linux/magic.h>``,
   :data:`_MAGIC`). This is the kernel's own answer for that very file: it needs no ``/proc``,
   no path, and sees file systems of other mount namespaces. ``f_type`` is the first field of
   ``struct statfs`` on every Linux ABI, a ``long`` except on s390 (an ``unsigned int``).
2. Where the magic cannot tell — ``devtmpfs`` reports the magic of tmpfs, and without
   ``fstatfs`` (not Linux) there is no magic — the descriptor's ``st_dev`` is looked up in
   ``/proc/self/mountinfo``: the type of the mount with that device number, against
   :data:`PSEUDO_TYPES`.

Neither tells (no ``fstatfs`` and no ``/proc``): not a pseudo file system — there is then no
procfs or sysfs to reach. Memory file systems that hold ordinary files (tmpfs, ramfs,
hugetlbfs) are not pseudo file systems here.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

__all__ = ["PSEUDO_TYPES", "pseudo_filesystem"]

# f_type of fstatfs(2) -> the file system's name, as /proc/self/mountinfo spells it.
_MAGIC: dict[int, str] = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0x62656570: "configfs",
    0xDE5E81E4: "efivarfs",
    0x6165676C: "pstore",
    0xCAFE4A11: "bpf",
    0x42494E4D: "binfmt_misc",
    0x65735543: "fusectl",
    0xF97CFF8C: "selinuxfs",
    0x43415D53: "smackfs",
    0x5A3C69F0: "apparmorfs",
    0x1CD1: "devpts",
    0x19800202: "mqueue",
    0x6E736673: "nsfs",
    0x0187: "autofs",
    0x9FA1: "openpromfs",
    0x9FA2: "usbdevfs",
    0xABBA1974: "xenfs",
    0x07655821: "resctrl",
    0x6C6F6F70: "binder",
    0x67596969: "rpc_pipefs",
}
# Shared by tmpfs and devtmpfs: only the mount table tells them apart.
_TMPFS_MAGIC = 0x01021994

PSEUDO_TYPES = frozenset(_MAGIC.values()) | {"devtmpfs"}
"""The mount types (``/proc/self/mountinfo`` spelling) whose files are never read."""

_MOUNTINFO = "/proc/self/mountinfo"
# struct statfs is 120 bytes on 64-bit Linux, 64 on 32-bit: room to spare.
_STATFS_BYTES = 256
_F_TYPE = ctypes.c_uint if platform.machine().startswith("s390") else ctypes.c_long


def pseudo_filesystem(fd: int) -> str | None:
    """The name of the pseudo file system the open descriptor ``fd`` lives on (``proc``,
    ``sysfs``, ``devtmpfs``…, see :data:`PSEUDO_TYPES`), or ``None`` for any other."""
    magic = _magic(fd)
    if magic is not None and magic != _TMPFS_MAGIC:
        return _MAGIC.get(magic)
    mounted = _mounted_type(os.fstat(fd).st_dev)
    return mounted if mounted in PSEUDO_TYPES else None


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _magic(fd: int) -> int | None:
    """``f_type`` of ``fstatfs(fd)``; ``None`` where there is no such call or it fails."""
    libc = _libc()
    fstatfs = getattr(libc, "fstatfs", None)
    if fstatfs is None:
        return None
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if fstatfs(ctypes.c_int(fd), buffer) != 0:
        return None
    return int(_F_TYPE.from_buffer(buffer).value) & 0xFFFFFFFF


def _mounted_type(dev: int) -> str | None:
    """The type of the mount whose device number is ``dev``; ``None`` if there is none or the
    mount table cannot be read."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as table:
            return _type_in_mountinfo(table.read(), dev)
    except OSError:
        return None


def _type_in_mountinfo(mountinfo: str, dev: int) -> str | None:
    """The file system type of the first line of ``mountinfo`` (``proc(5)``: ``id parent
    major:minor root point options [optional…] - type source super-options``) whose
    ``major:minor`` is ``dev``; ``None`` if no line has it."""
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    for line in mountinfo.splitlines():
        head, separator, tail = line.partition(" - ")  # paths escape a space as \040
        fields, kind = head.split(), tail.split()
        if separator and len(fields) >= 3 and kind and fields[2] == wanted:
            return kind[0]
    return None
