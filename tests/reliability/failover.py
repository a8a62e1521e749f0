"""A controller-mode broker group under load, for the failover tests and the failover benchmark.

`ControllerGroup` starts a registry, one or more controllers and the brokers of one group as
real processes (tests/reliability/nodes.py) and finds the current master two ways: as the
controller names it (CONTROLLER_GET_REPLICA_INFO) and as the registry routes it (id 0).
`SendLog` and `produce_steadily` keep the evidence a loss check needs: every acknowledged
send with its message id, queue and offset, and every failure with its time.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

from boltmq import Admin, Message, Producer, SendStatus
from protocol import RemotingClient, ResponseCode
from protocol.headers import SendMessageResponseHeader, decode_header
from protocol.message import MessageExt, decode_offset_msg_id
from tests.actors.broker.helpers import send_request
from tests.reliability.nodes import (
    Node,
    ReplicaInfo,
    commit_log_bytes,
    controller_broker_node,
    controller_node,
    controller_peers,
    epoch_cache,
    read_queue,
    registry_node,
    replica_info,
    route_master,
    wait_controller_master,
    wait_until,
)
from tests.support import remoting

BROKER_NAME = "broker-a"
#: Queues read back after a failover. A new master that did not yet copy a topic created
#: moments before its election (the slaves' config sync runs every 10 s, as RocketMQ's) makes
#: it on the first send from the TBW102 template, with that template's queue count (4 here,
#: more than the tests create); the route then lists those queues.
READ_QUEUES = 8


@attrs.frozen
class Acked:
    """One acknowledged send (SEND_OK): what a loss check looks for afterwards."""

    msg_id: str
    queue_id: int
    queue_offset: int
    body: bytes
    at: float  # time.monotonic() when the answer came
    #: The broker that stored it (``host:port``, from the offset msg id).
    stored_by: str


@attrs.define
class SendLog:
    """Every send of one or more producers: the acknowledged ones and the failures."""

    acked: list[Acked] = attrs.Factory(list)
    #: (time.monotonic(), what went wrong) of each send that was not SEND_OK.
    failures: list[tuple[float, str]] = attrs.Factory(list)

    def first_ack_after(self, moment: float, not_by: str = "") -> float | None:
        """The time of the first acknowledgement after ``moment`` from a broker other than
        ``not_by`` (None if none yet): an answer the old master sent just before it died
        and that arrived just after does not count as sends resuming."""
        times = [a.at for a in self.acked if a.at > moment and a.stored_by != not_by]
        return min(times) if times else None

    def acked_after(self, moment: float) -> int:
        """How many sends were acknowledged after ``moment``."""
        return sum(1 for a in self.acked if a.at > moment)


async def produce_steadily(
    producer: Producer, topic: str, prefix: str, log: SendLog, *, pause: float = 0.005
) -> None:
    """Send ``<prefix>-<n>`` bodies one at a time until cancelled, recording each answer.

    Each body is sent once (the producer should have no retries of its own): a send whose
    outcome is unknown is never repeated with the same body, so an acknowledged body must be
    found exactly once.
    """
    n = 0
    while True:
        body = f"{prefix}-{n}".encode()
        n += 1
        try:
            result = await producer.send(Message(topic, body))
        except Exception as exc:  # refusals, timeouts, no route: keep going, as a user would
            log.failures.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
            await trio.sleep(0.05)
            continue
        if result.status is SendStatus.SEND_OK:
            host, _ = decode_offset_msg_id(result.offset_msg_id)
            log.acked.append(
                Acked(result.msg_id, result.queue.queue_id, result.queue_offset, body,
                      time.monotonic(), f"{host[0]}:{host[1]}")
            )  # fmt: skip
        else:
            log.failures.append((time.monotonic(), result.status.value))
        await trio.sleep(pause)


async def send_to(
    client: RemotingClient, broker: str, topic: str, body: bytes, queue_id: int, log: SendLog
) -> int:
    """One SEND_MESSAGE straight to ``broker`` (no route), recorded in ``log``; the answer's
    code (-1 when no answer came in time)."""
    try:
        answer = await remoting.call(
            client, broker, send_request(topic, body, queue_id=queue_id), 3, deadline=4
        )
    except Exception as exc:
        log.failures.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
        return -1
    if answer.code != ResponseCode.SUCCESS:
        log.failures.append((time.monotonic(), f"{answer.code}: {answer.remark}"))
        return int(answer.code)
    stored = decode_header(SendMessageResponseHeader, answer.ext_fields)
    log.acked.append(
        Acked(stored.msg_id, stored.queue_id, stored.queue_offset, body, time.monotonic(), broker)
    )
    return int(answer.code)


def check_acked_exactly_once(acked: list[Acked], stored: dict[int, list[MessageExt]]) -> None:
    """Every acknowledged send is in ``stored`` (queue id -> messages from offset 0) at the
    offset it was acknowledged with, and its body is there once and only once."""
    bodies = Counter(m.body for messages in stored.values() for m in messages)
    missing, moved, repeated = [], [], []
    for ack in acked:
        messages = stored.get(ack.queue_id, [])
        at = next((m for m in messages if m.queue_offset == ack.queue_offset), None)
        if at is None:
            missing.append(ack)
        elif at.body != ack.body:
            moved.append((ack, at.body))
        if bodies[ack.body] != 1:
            repeated.append((ack.body, bodies[ack.body]))
    assert not missing, f"{len(missing)} acknowledged sends missing, first {missing[:3]}"
    assert not moved, f"{len(moved)} offsets hold another body, first {moved[:3]}"
    assert not repeated, f"{len(repeated)} acknowledged bodies not stored once: {repeated[:3]}"


@attrs.define
class ControllerGroup:
    """A registry, controllers and one controller-mode broker group, as processes."""

    root: Path
    registry: Node
    controllers: list[Node]
    brokers: list[Node]

    @property
    def controller_addr(self) -> str:
        """controllerAddr as the brokers are given it."""
        return ";".join(c.address for c in self.controllers)

    @property
    def nodes(self) -> list[Node]:
        """Every node, in start order."""
        return [self.registry, *self.controllers, *self.brokers]

    def broker_at(self, address: str) -> Node:
        """The broker node listening on ``address``."""
        for broker in self.brokers:
            if broker.address == address:
                return broker
        raise AssertionError(f"no broker of the group at {address}")

    async def replica_info(self, client: RemotingClient) -> ReplicaInfo | None:
        """The group's master and SyncStateSet as the first answering controller has them."""
        return await replica_info(client, self.controller_addr, BROKER_NAME)

    async def wait_master(
        self,
        client: RemotingClient,
        *,
        not_address: str | None = None,
        above_epoch: int = 0,
        timeout: float = 60.0,
    ) -> tuple[Node, ReplicaInfo]:
        """Wait for a master named by the controller; its node and the controller's answer."""
        info = await wait_controller_master(
            client, self.controller_addr, BROKER_NAME, not_address=not_address,
            above_epoch=above_epoch, timeout=timeout,
        )  # fmt: skip
        assert info.master_address is not None
        return self.broker_at(info.master_address), info

    async def wait_routed(self, client: RemotingClient, topic: str, master: Node) -> None:
        """Wait until the registry routes ``topic``'s writes (id 0) to ``master``."""

        async def routed() -> bool:
            try:
                return await route_master(client, self.registry.address, topic, BROKER_NAME) == (
                    master.address
                )
            except Exception:
                return False

        await wait_until(routed, 60, f"the registry routing {topic} to {master.address}")

    async def wait_in_sync(self, client: RemotingClient, members: int, timeout: float = 60) -> None:
        """Wait until the controller's SyncStateSet holds ``members`` brokers."""

        async def in_sync() -> bool:
            info = await self.replica_info(client)
            return info is not None and len(info.sync_state_set) >= members

        await wait_until(in_sync, timeout, f"a SyncStateSet of {members}")

    async def create_topic(
        self, client: RemotingClient, topic: str, master: Node, queues: int
    ) -> None:
        """Create ``topic`` on the master and wait for its route."""
        async with Admin(namesrv_addr=self.registry.address) as admin:
            await admin.create_topic(topic, broker_addr=master.address, queue_nums=queues)
        await self.wait_routed(client, topic, master)

    async def read_topic(
        self, client: RemotingClient, broker: Node, topic: str, queues: int = READ_QUEUES
    ) -> dict[int, list[MessageExt]]:
        """Every message of ``topic`` on ``broker``, by queue, pulled from offset 0."""
        return {q: await read_queue(client, broker.address, topic, q) for q in range(queues)}

    async def wait_same_log(self, client: RemotingClient, slave: Node, master: Node) -> None:
        """Wait until ``slave`` has ``master``'s epochs and commit-log end, then check that
        their commit logs are the same bytes up to it."""

        async def same() -> bool:
            try:
                caches = [await epoch_cache(client, b.address) for b in (slave, master)]
            except Exception:
                return False
            return (
                caches[0].epoch_list == caches[1].epoch_list
                and caches[0].max_offset == caches[1].max_offset
            )

        await wait_until(same, 90, f"{slave.address} following {master.address} to its end")
        end = (await epoch_cache(client, master.address)).max_offset
        assert commit_log_bytes(slave.store, end) == commit_log_bytes(master.store, end), (
            f"{slave.address} and {master.address} hold different commit logs up to {end}"
        )

    async def stop(self) -> None:
        """Stop every node still running, brokers first."""
        for node in reversed(self.nodes):
            await node.stop()


async def start_group(
    root: Path,
    *,
    brokers: int = 3,
    controllers: int = 1,
    broker_settings: dict[str, Any] | None = None,
    controller_settings: dict[str, Any] | None = None,
    per_broker: list[dict[str, Any]] | None = None,
) -> ControllerGroup:
    """Start a registry, ``controllers`` standalone controllers (Raft among them when more
    than one) and ``brokers`` controller-mode brokers of group broker-a."""
    registry = registry_node(root)
    await registry.start()
    if controllers == 1:
        nodes = [controller_node(root, **(controller_settings or {}))]
    else:
        peers, ids = controller_peers(controllers)
        nodes = [
            controller_node(root, f"controller-{i}", peers=peers, self_id=i,
                            **(controller_settings or {}))
            for i in ids
        ]  # fmt: skip
    group = ControllerGroup(root, registry, nodes, [])
    try:
        async with trio.open_nursery() as nursery:
            for node in nodes:
                nursery.start_soon(node.start)
        for n in range(brokers):
            settings = {**(broker_settings or {}), **(per_broker[n] if per_broker else {})}
            group.brokers.append(
                controller_broker_node(root, f"broker-a-{n}", registry.address,
                                       group.controller_addr, **settings)
            )  # fmt: skip
        # One at a time: the first to register becomes the master of a new group.
        for broker in group.brokers:
            await broker.start()
    except BaseException:
        await group.stop()
        raise
    return group
