"""Process limits a server raises for itself at start.

Each consume-queue file a broker maps holds one file descriptor (Python's mmap keeps a
duplicate of the file's), so a broker with thousands of topics of 8 queues needs tens of
thousands of descriptors beside its connections. Many systems start processes with a soft
open-file limit of 1,024 and a far higher hard limit; the Java broker's JVM raises its soft
limit to the hard one by itself, and so does this.
"""

from __future__ import annotations

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
