"""Consume-queue files hold no descriptor (mapped with libc's mmap, the descriptor closed at
once): a broker's queue count is not bounded by the open-file limit; a flush (msync on the map)
still makes the entries durable and they load again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from storage import MessageExtBrokerInner, PutMessageStatus, open_message_store
from tests.storage.helpers import small_config

ROOT = Path(__file__).resolve().parents[2]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_queue_file_holds_no_descriptor_and_flushes(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    keys = [(f"T{n // 8}", n % 8) for n in range(200)]
    async with open_message_store(config) as store:
        before = _open_descriptors()
        for topic, queue_id in keys:
            message = MessageExtBrokerInner(topic=topic, body=b"x", queue_id=queue_id)
            result = await store.put_message(message)
            assert result.status is PutMessageStatus.PUT_OK
        assert all(store.get_max_offset_in_queue(t, q) == 1 for t, q in keys)
        # 200 new queue files: no descriptor each (one each with Python's mmap).
        assert _open_descriptors() - before <= 10
        store.flush_logics()
        for topic, queue_id in keys:
            queue = store.consume_queues.find(topic, queue_id)
            assert queue is not None
            mapped = queue.files.files[0]
            assert mapped.flushed_position == mapped.wrote_position == 20
    async with open_message_store(config) as store:
        assert all(store.get_max_offset_in_queue(t, q) == 1 for t, q in keys)
        assert store.get_message("G", "T24", 7, 0, 1, None).message_count == 1


def test_queues_up_to_the_open_file_limit(tmp_path: Path) -> None:
    # Soft limit 200: 320 queues, each with a message and flushed (one descriptor per queue
    # file would need 320 and stop the store writer with EMFILE).
    script = textwrap.dedent(f"""
        import resource, trio
        from pathlib import Path
        from storage import MessageExtBrokerInner, PutMessageStatus, open_message_store
        from tests.storage.helpers import small_config

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))

        async def main() -> None:
            config = small_config(Path({str(tmp_path / "store")!r}))
            async with open_message_store(config) as store:
                for n in range(320):
                    message = MessageExtBrokerInner(
                        topic=f"T{{n // 8}}", body=b"x", queue_id=n % 8
                    )
                    result = await store.put_message(message)
                    assert result.status is PutMessageStatus.PUT_OK, (n, result)
                store.flush_logics()
                print(store.get_max_offset_in_queue("T39", 7), flush=True)

        trio.run(main)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "1"
