"""Pop state across a clean restart of a file-store broker: every message in flight at the
stop comes back once its invisible time ends, exactly once; acked ones never; a handle given
before the stop still acks after it, once. (The SIGKILL case is in tests/reliability.)"""

from __future__ import annotations

import time
from pathlib import Path

import trio

from protocol import RemotingClient, ResponseCode
from tests.actors.broker.delays import open_cluster, send
from tests.actors.broker.pop_helpers import Popped, ack_request, change_request, new_handle, pop
from tests.support.remoting import call


async def pop_for(client: RemotingClient, address: str, topic: str, seconds: float) -> list[Popped]:
    """Everything popped (60 s invisible) in ``seconds``."""
    found: list[Popped] = []
    with trio.move_on_after(seconds):
        while True:
            found += await pop(client, address, topic, poll_ms=300, invisible_ms=60_000)
    return found


async def test_in_flight_messages_come_back_after_a_restart(tmp_path: Path) -> None:
    async with RemotingClient() as client:
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            for i in range(5):
                await send(client, address, "PopRestart", f"m{i}".encode(), queue_id=0)
            popped = await pop(client, address, "PopRestart", invisible_ms=2000)
            assert len(popped) == 5
            for done in popped[:2]:
                answer = await call(client, address, ack_request("PopRestart", done))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            # Still in flight: the handle given before the stop acks, once.
            answer = await call(client, address, ack_request("PopRestart", popped[2]))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            answer = await call(client, address, ack_request("PopRestart", popped[0]))
            assert answer.code == ResponseCode.NO_MESSAGE  # acked before the stop
            back = await pop_for(client, address, "PopRestart", 6)
            assert sorted(p.message.body for p in back) == [b"m3", b"m4"]
            assert all(p.message.reconsume_times == 1 for p in back)


async def test_a_fifo_queue_stays_held_across_a_restart(tmp_path: Path) -> None:
    async with RemotingClient() as client:
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            for i in range(3):
                await send(client, address, "PopFifoRestart", f"m{i}".encode(), queue_id=0)
            fifo = {"queue_id": 0, "max_msgs": 1, "order": True}
            (first,) = await pop(client, address, "PopFifoRestart", **fifo, attempt_id="a1")
            answer = await call(client, address, ack_request("PopFifoRestart", first))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            (second,) = await pop(
                client, address, "PopFifoRestart", **fifo, attempt_id="a2", invisible_ms=4000
            )
            assert second.message.body == b"m1"
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            # Acked m0 never comes back; m1 is held until its invisible time ends, then first.
            fields = second.handle.split(" ")
            due_ms = int(fields[1]) + int(fields[2])
            early = await pop(client, address, "PopFifoRestart", **fifo, attempt_id="a0")
            if time.time() * 1000 < due_ms - 300:  # asked well before it was due
                assert early == []
            back = early  # a restart slower than the invisible time finds it at once
            with trio.fail_after(15):
                while not back:
                    back = await pop(
                        client, address, "PopFifoRestart", **fifo, attempt_id="a3", poll_ms=300
                    )
            assert back[0].message.body == b"m1"
            answer = await call(client, address, ack_request("PopFifoRestart", back[0]))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            (third,) = await pop(client, address, "PopFifoRestart", **fifo, attempt_id="a4")
            assert third.message.body == b"m2"


async def test_a_changed_handle_holds_across_a_restart(tmp_path: Path) -> None:
    async with RemotingClient() as client:
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            await send(client, address, "PopChangeRestart", b"m0", queue_id=0)
            (popped,) = await pop(client, address, "PopChangeRestart", invisible_ms=60_000)
            answer = await call(client, address, change_request("PopChangeRestart", popped, 60_000))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            changed = new_handle(popped, answer)
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            answer = await call(client, address, ack_request("PopChangeRestart", popped))
            assert answer.code == ResponseCode.NO_MESSAGE  # retired before the stop
            answer = await call(client, address, ack_request("PopChangeRestart", changed))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
