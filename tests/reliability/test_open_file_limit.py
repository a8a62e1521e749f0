"""A broker at its open-file limit: consume-queue files hold no descriptor once mapped, but
opening one takes a descriptor for a moment, so under a low RLIMIT_NOFILE (soft and hard, the
broker cannot raise it) whose descriptors are taken by client connections, a send to a queue
without a file yet is refused before its record is written (SERVICE_NOT_AVAILABLE with a
remark naming the limit), the broker logs one line saying which limit and how to raise it,
and the queues that have their file keep being served. Restarted with room, the store holds
every acknowledged message and nothing of the refused ones (recovery would have dispatched a
record that was appended before the refusal).
"""

from __future__ import annotations

import re
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from protocol import RemotingClient, RemotingCommand, names
from protocol.codes import RequestCode, ResponseCode
from protocol.headers import CreateTopicRequestHeader, encode_header
from protocol.message import BatchElement, encode_batch
from tests.actors.broker.helpers import send_request
from tests.reliability.nodes import broker_node, call, max_offset, read_queue

pytestmark = pytest.mark.timeout(180)

TOPIC = "LimitTopic"
QUEUES = 512
#: Soft and hard: the broker's own start-up descriptors plus about 200 connections.
LIMIT = 256


def _with_open_file_limit(limit: int) -> tuple[str, ...]:
    """A command prefix that runs the node with RLIMIT_NOFILE ``limit`` (soft and hard)."""
    script = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return (sys.executable, "-c", script)


async def _create_topic(client: RemotingClient, address: str) -> None:
    header = CreateTopicRequestHeader(
        topic=TOPIC, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        read_queue_nums=QUEUES, write_queue_nums=QUEUES,
        perm=6, topic_filter_type="SINGLE_TAG", topic_sys_flag=0, order=False,
    )  # fmt: skip
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header))
    answer = await call(client, address, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _batch(queue_id: int, n: int) -> RemotingCommand:
    body = encode_batch(BatchElement(0, f"b{queue_id}-{i}".encode(), "") for i in range(n))
    return send_request(
        TOPIC, body, queue_id=queue_id, batch=True, code=RequestCode.SEND_BATCH_MESSAGE
    )


async def test_a_send_past_the_open_file_limit_is_refused_before_it_is_written(
    tmp_path: Path,
) -> None:
    broker = broker_node(tmp_path, "broker", "", prefix=_with_open_file_limit(LIMIT))
    await broker.start()
    acked: dict[int, int] = {}
    try:
        async with RemotingClient() as client, AsyncExitStack() as idle:
            await _create_topic(client, broker.address)
            refusal = None
            for queue_id in range(QUEUES):
                # One more connection (a descriptor in the broker), answered before the send:
                # the broker had a descriptor free for it, so it never hangs in accept.
                other = await idle.enter_async_context(RemotingClient())
                assert await max_offset(other, broker.address, TOPIC, 0) >= 0
                answer = await call(
                    client,
                    broker.address,
                    send_request(TOPIC, b"m%d" % queue_id, queue_id=queue_id),
                )
                if answer.code != ResponseCode.SUCCESS:
                    refusal = (queue_id, answer)
                    break
                acked[queue_id] = 1
            assert refusal is not None, f"{QUEUES} queue files fit under a limit of {LIMIT}"
            first_refused, answer = refusal
            assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer.remark
            assert "open-file limit" in (answer.remark or ""), answer.remark
            # Queue files hold no descriptor: connections, not queues, took the limit.
            assert first_refused > 100, "the broker refused before using its descriptors"
            # Other new queues are refused the same way: single sends and batches. A
            # descriptor the broker held for a moment (a table file written, a connection
            # being accepted) may be free again by the next send: then that queue opens its
            # file and stores the message; a refused one stores nothing.
            reopened = 0
            for queue_id in range(first_refused, first_refused + 5):
                for request, count in (
                    (send_request(TOPIC, b"x", queue_id=queue_id), 1),
                    (_batch(queue_id, 4), 4),
                ):
                    answer = await call(client, broker.address, request)
                    if answer.code == ResponseCode.SUCCESS:
                        acked[queue_id] = acked.get(queue_id, 0) + count
                        reopened += 1
                    else:
                        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer.remark
                        assert "open-file limit" in (answer.remark or ""), answer.remark
                assert await max_offset(client, broker.address, TOPIC, queue_id) == acked.get(
                    queue_id, 0
                )
            assert reopened < 10, "no send was refused after the first refusal"
            # The writer keeps serving the queues that have their file, one send and batches.
            for queue_id in (0, 1, first_refused - 1):
                answer = await call(
                    client, broker.address, send_request(TOPIC, b"again", queue_id=queue_id)
                )
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                answer = await call(client, broker.address, _batch(queue_id, 4))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                acked[queue_id] += 5
                assert await max_offset(client, broker.address, TOPIC, queue_id) == acked[queue_id]
            assert broker.process is not None and broker.process.poll() is None
        log = broker.log_text()
        lines = [line for line in log.splitlines() if "cannot open a consume-queue file" in line]
        # One line, and one more only after a queue file opened again in between.
        assert 1 <= len(lines) <= 1 + reopened, lines
        assert f"RLIMIT_NOFILE) is {LIMIT}" in lines[0], lines[0]
        assert "ulimit -n" in lines[0] and "LimitNOFILE" in lines[0], lines[0]
        # trio's accept loop meets the same limit (Linux's accept fails with EMFILE even with
        # no connection waiting) and logs it with its traceback; anything else must not fail.
        records = re.split(r"\n(?=\d{4}-\d\d-\d\d )", log)
        rest = "\n".join(r for r in records if "serve_listeners: accept returned EMFILE" not in r)
        assert not re.search(r"Traceback|crashed|is stopped", rest), rest[-3000:]
        await broker.stop()
        # Restarted with room: every acknowledged message, nothing of the refused sends.
        broker.prefix = ()
        await broker.start()
        async with RemotingClient() as client:
            for queue_id in range(first_refused + 5):
                messages = await read_queue(client, broker.address, TOPIC, queue_id)
                assert len(messages) == acked.get(queue_id, 0), queue_id
    finally:
        await broker.stop()
