"""Hostile clients against one broker process: 10,000 idle connections, a half frame, a flood
of held pulls past maxHeldPulls, a client that never reads its answers. The broker's memory
(VmRSS) stays under the bounds docs/reliability.md states, a good client keeps being served
throughout, and the broker does not log per frame.
"""

from __future__ import annotations

import resource
import socket
import struct
from pathlib import Path

import pytest
import trio

from protocol import RemotingClient
from protocol.codes import ResponseCode
from protocol.frame import encode
from tests.actors.broker.helpers import pull_request, send_request
from tests.reliability.nodes import Node, broker_node, call
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "HostileTopic"
IDLE_CONNECTIONS = 10_000
MAX_HELD_PULLS = 200
#: The bounds the test holds the broker to (docs/reliability.md states them).
KIB_PER_IDLE_CONNECTION = 40
NEVER_READ_GROWTH_MIB = 160


def raise_fd_limit(needed: int) -> None:
    """Raise this process's open-file limit (the broker inherits it) or skip saying why."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"{IDLE_CONNECTIONS} connections need {needed} open files; the hard "
                    f"limit here is {hard}")  # fmt: skip
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError) as exc:
        pytest.skip(f"cannot raise the open-file limit to {needed}: {exc}")


@pytest.fixture
def many_files() -> None:
    """The open-file limit raised for the idle connections (skipped, saying why, if not)."""
    raise_fd_limit(IDLE_CONNECTIONS + 2048)


async def served(client: RemotingClient, broker: Node) -> None:
    """A good client's send and pull both answered (within the call deadline)."""
    answer = await call(client, broker.address, send_request(TOPIC, b"good", queue_id=1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    offset = int((answer.ext_fields or {})["queueOffset"])
    answer = await call(client, broker.address, pull_request(TOPIC, offset, queue_id=1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def log_lines(broker: Node) -> int:
    return broker.log_text().count("\n")


@pytest.mark.usefixtures("many_files")
async def test_hostile_clients_leave_memory_bounded_and_good_clients_served(
    tmp_path: Path,
) -> None:
    broker = broker_node(tmp_path, "broker", "", maxHeldPulls=MAX_HELD_PULLS)
    await broker.start()
    try:
        async with RemotingClient() as client:
            for _ in range(200):  # answers for the never-reading client below
                answer = await call(client, broker.address,
                                    send_request(TOPIC, bytes(1000), queue_id=0))  # fmt: skip
                assert answer.code == ResponseCode.SUCCESS
            await served(client, broker)
            base_rss = broker.rss_kib()
            base_lines = log_lines(broker)

            # 10,000 idle connections.
            idle: list[trio.SocketStream] = []
            try:
                for _ in range(IDLE_CONNECTIONS):
                    idle.append(await trio.open_tcp_stream("127.0.0.1", broker.port))
                await served(client, broker)
                idle_rss = broker.rss_kib()
                per_connection = (idle_rss - base_rss) / IDLE_CONNECTIONS
                print(f"{IDLE_CONNECTIONS} idle connections: {per_connection:.1f} KiB each")
                assert per_connection < KIB_PER_IDLE_CONNECTION

                # Half a frame, then silence.
                half = await trio.open_tcp_stream("127.0.0.1", broker.port)
                await half.send_all(struct.pack(">ii", 1000, 16) + b'{"code":')
                await served(client, broker)

                # A flood of held pulls past maxHeldPulls on one connection: those past the
                # bound are answered at once (PULL_NOT_FOUND); a message wakes the held ones.
                answered: list[int] = []

                async def held_pull() -> None:
                    request = pull_request(TOPIC, 0, queue_id=2, suspend_ms=60_000)
                    answer = await call(client, broker.address, request)
                    answered.append(answer.code)

                async with trio.open_nursery() as nursery:
                    for _ in range(3 * MAX_HELD_PULLS):
                        nursery.start_soon(held_pull)
                    await wait_until(lambda: len(answered) >= 2 * MAX_HELD_PULLS, 30,
                                     "the pulls past maxHeldPulls answered")  # fmt: skip
                    assert set(answered) == {ResponseCode.PULL_NOT_FOUND}
                    await served(client, broker)
                    answer = await call(client, broker.address,
                                        send_request(TOPIC, b"wake", queue_id=2))  # fmt: skip
                    assert answer.code == ResponseCode.SUCCESS
                assert answered.count(ResponseCode.SUCCESS) == MAX_HELD_PULLS

                # A client that sends pulls and never reads an answer.
                before_rss = broker.rss_kib()
                with socket.socket() as deaf:
                    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    deaf.connect(("127.0.0.1", broker.port))
                    deaf.setblocking(False)
                    frames = b"".join(
                        encode(pull_request(TOPIC, n % 150, queue_id=0)) for n in range(4000)
                    )
                    sent = 0
                    with trio.move_on_after(20):
                        while sent < len(frames):
                            try:
                                sent += deaf.send(frames[sent : sent + 65536])
                            except BlockingIOError:
                                await trio.sleep(0.05)  # the broker stopped reading it
                    await served(client, broker)
                    growth_mib = (broker.rss_kib() - before_rss) / 1024
                    print(f"a client that never reads: {sent} bytes of pulls taken, broker "
                          f"memory +{growth_mib:.0f} MiB")  # fmt: skip
                    assert growth_mib < NEVER_READ_GROWTH_MIB
                await half.aclose()
            finally:
                for stream in idle:
                    await stream.aclose()
            await served(client, broker)
            # Logged per connection at most, never per frame.
            assert log_lines(broker) - base_lines < 50, broker.log_text()[-3000:]
    finally:
        await broker.stop()
