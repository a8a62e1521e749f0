"""Process limits a server raises for itself at start.

A broker's descriptors go to its connections and store files; consume-queue files hold none
once mapped where libc maps them (Linux), else one each (Python's mmap keeps a duplicate of
the file's), tens of thousands for thousands of topics. Many systems start processes with a soft
open-file limit of 1,024 and a far higher hard limit; the Java broker's JVM raises its soft
limit to the hard one by itself, and so does this.
"""

from __future__ import annotations

import errno
import logging

log = logging.getLogger("boltmq.limits")

#: Used as the target when the hard limit is unlimited (the kernel's usual nr_open).
UNLIMITED_TARGET = 1 << 20


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one; (soft, hard) afterwards, or (-1, -1)
    where the platform has no such limits."""
    try:
        import resource
    except ImportError:  # not a Unix
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return soft, hard


def open_failure_advice(exc: OSError) -> str:
    """Which limit a failed open or map of a store file ran into, and how an operator raises
    it (one line, for the log)."""
    if exc.errno == errno.EMFILE:
        soft, hard = open_file_limit()
        return (
            f"the broker's open-file limit (RLIMIT_NOFILE) is {soft:,} (hard {hard:,}) and it is "
            "reached (connections, store files, and a consume-queue file while it is opened); "
            "raise it with `ulimit -n N` (as root) before starting the "
            "broker, or LimitNOFILE=N in its systemd unit"
        )
    if exc.errno == errno.ENFILE:
        return (
            "the system's open-file table is full (fs.file-max); raise it with "
            "`sysctl -w fs.file-max=N`"
        )
    if exc.errno == errno.ENOMEM:
        return (
            "the process cannot map another file (vm.max_map_count: one map per store file) or "
            "is out of memory; raise the map count with `sysctl -w vm.max_map_count=N`"
        )
    return f"{exc.strerror or exc}"


def open_file_limit() -> tuple[int, int]:
    """The (soft, hard) open-file limit now; -1 stands for unlimited or no such limit."""
    try:
        import resource
    except ImportError:  # not a Unix
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return (-1 if soft == unlimited else soft), (-1 if hard == unlimited else hard)
