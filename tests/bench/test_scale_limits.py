"""The cost-growth bench's open-file limit: a topic count whose queue files need more than the
hard limit gets a broker started with a limit that fits where raising it is allowed, else one
line saying what limit is needed and how to set it, and the most topics that fit."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

import bench.scale
from bench.scale import BROKER_BASE_FILES, _broker_file_limit
from bench.scale_nodes import (
    QUEUES,
    ROOT,
    can_start_with_open_file_limit,
    open_file_limit_setter,
)
from storage.mapped_file import QUEUE_FILE_DESCRIPTORS


def test_a_limit_within_the_hard_one_needs_nothing() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert can_start_with_open_file_limit(min(hard, 1024)) is None
    assert _broker_file_limit(1) == (1, None)


def test_queue_files_without_descriptors_fit_any_topic_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if QUEUE_FILE_DESCRIPTORS:
        pytest.skip("queue files hold a descriptor here (no libc to map them without one)")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    size = 100_000 if hard == resource.RLIM_INFINITY else hard // QUEUES + 100
    assert _broker_file_limit(size) == (size, None)
    assert capsys.readouterr().out == ""


def test_more_topics_than_the_hard_limit_fits(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where each queue file holds a descriptor (no libc to map it without one), as RocketMQ's
    # MappedFile holds a FileChannel.
    monkeypatch.setattr(bench.scale, "QUEUE_FILE_DESCRIPTORS", 1)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("the hard open-file limit is unlimited here: every topic count fits")
    size = hard // QUEUES + 100
    needed = size * QUEUES + BROKER_BASE_FILES
    measured, nofile = _broker_file_limit(size)
    out = capsys.readouterr().out
    if nofile is not None:
        # Allowed to raise it: the broker gets the limit, and it really starts with it.
        assert (measured, nofile) == (size, needed) and out == ""
        code = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, preexec_fn=open_file_limit_setter(nofile),
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert done.stdout.strip() == f"({needed}, {needed})"
    else:
        assert 0 < measured * QUEUES + BROKER_BASE_FILES <= hard
        assert measured % 100 == 0 and measured < size
        assert f"open-file limit of at least {needed:,}" in out
        assert f"ulimit -n {needed}" in out and f"LimitNOFILE={needed}" in out
        assert f"traffic over {measured:,} topics" in out
