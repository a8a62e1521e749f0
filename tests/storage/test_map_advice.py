"""Consume-queue files are mapped for small writes (no readahead, so a new file's first write
does not fault in one large folio for the whole file); the commit log keeps the default."""

from __future__ import annotations

from pathlib import Path

from storage import MessageExtBrokerInner, PutMessageStatus, open_message_store
from tests.storage.helpers import small_config


def _vm_flags(path: Path) -> set[str]:
    """The VmFlags of this process's mapping of ``path`` (from /proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(str(path)):
            for detail in lines[i + 1 :]:
                if detail.startswith("VmFlags:"):
                    return set(detail.split()[1:])
    raise AssertionError(f"{path} is not mapped")


async def test_consume_queue_maps_read_randomly_and_the_commit_log_does_not(
    tmp_path: Path,
) -> None:
    config = small_config(tmp_path / "store")
    async with open_message_store(config) as store:
        result = await store.put_message(MessageExtBrokerInner(topic="T", body=b"x", queue_id=3))
        assert result.status is PutMessageStatus.PUT_OK
        assert store.get_max_offset_in_queue("T", 3) == 1  # dispatched: the queue file exists
        queue_file = next((config.consume_queue_dir / "T" / "3").iterdir())
        log_file = next(config.commit_log_dir.iterdir())
        assert "rr" in _vm_flags(queue_file)  # VM_RAND_READ: MADV_RANDOM
        assert "rr" not in _vm_flags(log_file)
