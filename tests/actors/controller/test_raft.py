"""Three controllers agreeing through Raft (pysyncobj) in one trio program.

A write through the leader is read back from the followers; a follower refuses writes
naming the leader; the leader stops -> another leads within a deadline, the state is kept,
writes work, and a group whose master goes silent still gets a new master; the stopped
controller restarts from its journal and catches up.

Loopback only; Raft ports are free ports found just before the start; deadlines are
generous (a busy 2-core machine).
"""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from actors.controller import Controller, ControllerConfig
from actors.controller.raft import RaftJournal
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingError
from protocol.headers import GetNextBrokerIdRequestHeader

from .helpers import Beating, alter, call, elect, join, replica_info


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Node:
    """One controller in a cancel scope of its own, so a test can stop and restart it."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.controller: Controller | None = None
        self.scope: trio.CancelScope | None = None
        self.address = ""

    async def start(self, nursery: trio.Nursery) -> None:
        self.controller = Controller(self.config)
        self.scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[None]) -> None:
            assert self.controller is not None and self.scope is not None
            with self.scope:
                await self.controller.run(task_status=task_status)

        await nursery.start(run)
        self.address = self.controller.address
        self.config.listen_port = self.controller.port or 0  # same port on a restart

    def stop(self) -> None:
        assert self.scope is not None
        self.scope.cancel()


async def wait_leader(nodes: list[Node], deadline: float = 30) -> Node:
    with trio.fail_after(deadline):
        while True:
            for node in nodes:
                controller = node.controller
                # Leads, and knows its own remoting address from the replicated state.
                if (
                    controller is not None
                    and controller.journal.is_leader()
                    and controller.journal.leader_address() == node.address
                ):
                    return node
            await trio.sleep(0.05)


async def test_three_controllers_keep_the_state_and_elect_after_the_leader_stops(
    tmp_path: Path,
) -> None:
    raft_ports = free_ports(3)
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(raft_ports))
    nodes = [
        Node(
            ControllerConfig(
                listen_port=0,
                controller_dleger_self_id=f"n{i}",
                controller_dleger_peers=peers,
                controller_store_path=str(tmp_path / f"n{i}"),
                scan_not_active_broker_interval=200,
            )
        )
        for i in range(3)
    ]
    async with RemotingClient() as client, trio.open_nursery() as nursery:
        for node in nodes:
            await node.start(nursery)
        leader = await wait_leader(nodes)
        followers = [n for n in nodes if n is not leader]
        beating = Beating(client, [n.address for n in nodes])

        first = await join(client, leader.address)
        second = await join(client, leader.address)
        beating.add(first, max_offset=100)
        beating.add(second, max_offset=90)
        await beating.beat_once()
        nursery.start_soon(beating.run)
        assert (await elect(client, leader.address, first)).code == 0
        assert (await alter(client, leader.address, first, 1, [first, second], 1)).code == 0

        # The followers apply the same events: reads answer from their copy.
        for follower in followers:
            with trio.fail_after(20):
                while True:
                    info = await replica_info(client, follower.address)
                    if info.code == 0 and info.field("masterBrokerId") == str(first):
                        break
                    await trio.sleep(0.05)
            meta = await call(client, follower.address, RequestCode.CONTROLLER_GET_METADATA_INFO)
            assert meta.field("isLeader") == "false"
            assert meta.field("controllerLeaderAddress") == leader.address
            # A write to a follower is refused, naming the leader's remoting address.
            refused = await elect(client, follower.address, second, designate=True)
            assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert leader.address in (refused.remark or "")

        # The leader stops: another leads within a deadline and has the state.
        leader.stop()
        new_leader = await wait_leader(followers)
        info = await replica_info(client, new_leader.address)
        assert (info.field("masterBrokerId"), info.field("masterEpoch")) == (str(first), "1")
        third = await join(client, new_leader.address)  # writes work
        assert third == 3

        # The master goes silent: the new leader elects the in-sync broker.
        beating.silence(first)
        with trio.fail_after(30):
            while (await replica_info(client, new_leader.address)).field("masterBrokerId") != str(
                second
            ):
                await trio.sleep(0.1)
        assert (await replica_info(client, new_leader.address)).field("masterEpoch") == "2"

        # The running two compact their logs into dumps, so the old leader, restarting
        # from its journal, needs the leader's dump to catch up (epoch 2, broker 3).
        for follower in followers:
            assert follower.controller is not None
            raft = follower.controller.journal
            assert isinstance(raft, RaftJournal) and raft._state is not None
            raft._state.forceLogCompaction()
        with trio.fail_after(30):
            while not all((Path(f.config.controller_store_path) / "raft.dump").exists()
                          for f in followers):  # fmt: skip
                await trio.sleep(0.05)
        await leader.start(nursery)
        with trio.fail_after(30):
            while True:
                try:
                    info = await replica_info(client, leader.address)
                except RemotingError:
                    info = None  # the client still backs off from the stopped port
                if info is not None and info.code == 0 and info.field("masterEpoch") == "2":
                    break
                await trio.sleep(0.1)
        assert leader.controller is not None
        with leader.controller.journal.lock:
            group = leader.controller.journal.table.groups["broker-a"]
            assert sorted(group.addresses) == [1, 2, 3]
        # It got there through the leader's dump: it holds one of its own now.
        assert (Path(leader.config.controller_store_path) / "raft.dump").exists()
        nursery.cancel_scope.cancel()


async def test_a_controller_without_a_majority_refuses_writes_and_still_reads(
    tmp_path: Path,
) -> None:
    raft_ports = free_ports(3)
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(raft_ports))
    nodes = [
        Node(
            ControllerConfig(
                listen_port=0,
                controller_dleger_self_id=f"n{i}",
                controller_dleger_peers=peers,
                controller_store_path=str(tmp_path / f"n{i}"),
                controller_commit_timeout=1000,
            )
        )
        for i in range(3)
    ]
    async with RemotingClient() as client, trio.open_nursery() as nursery:
        for node in nodes:
            await node.start(nursery)
        leader = await wait_leader(nodes)
        broker_id = await join(client, leader.address)
        for node in nodes:
            if node is not leader:
                node.stop()
        # Cut from the majority, the leader steps down (leaderFallbackTimeout) or cannot
        # commit: either way a write is refused with a code a broker acts on, never a hang.
        with trio.fail_after(30):
            while True:
                reply = await join_attempt(client, leader.address)
                if reply == ResponseCode.CONTROLLER_NOT_LEADER:
                    break
                assert reply in (ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR, ResponseCode.SUCCESS)
                await trio.sleep(0.2)
        info = await replica_info(client, leader.address)  # reads still answer
        assert info.code == ResponseCode.SUCCESS
        assert broker_id == 1
        nursery.cancel_scope.cancel()


async def join_attempt(client: RemotingClient, address: str) -> int:
    """The code CONTROLLER_GET_NEXT_BROKER_ID (a write) is answered with."""
    header = GetNextBrokerIdRequestHeader(cluster_name="DefaultCluster", broker_name="broker-a")
    reply = await call(client, address, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header)
    return reply.code
