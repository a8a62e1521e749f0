"""Network faults between a master and its slave and between a client and a broker, made by
the test with a network namespace and a veth pair (root only; skipped with the reason where
the machine does not allow it).

The slave runs in a namespace of its own, reachable over the veth pair. Taking the host end
of the pair down partitions it: a SYNC_MASTER then answers FLUSH_SLAVE_TIMEOUT after
slaveTimeout (the message is stored on the master), never hangs; when the link comes back
the slave catches up to the master's commit log. A producer cut off from its broker the same
way gets an error within its send timeout, and sends again once the link is back. Delay and
loss (tc netem) need the sch_netem kernel module; without it that test is skipped saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from boltmq import Message, MQClientError, Producer, SendStatus
from protocol import RemotingClient
from protocol.codes import ResponseCode
from tests.actors.broker.helpers import send_request
from tests.reliability.netns import run, veth_namespace
from tests.reliability.nodes import (
    Node,
    broker_node,
    call,
    max_offset,
    registry_node,
    wait_until,
)

pytestmark = pytest.mark.timeout(150)

TOPIC = "PartitionTopic"


@attrs.frozen
class Link:
    """A namespace and the veth pair joining it to the host."""

    namespace: str
    host_end: str
    host_ip: str
    namespace_ip: str

    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside the namespace."""
        return ("ip", "netns", "exec", self.namespace)


@pytest.fixture
def link() -> Iterator[Link]:
    """A fresh namespace with a veth pair to the host; removed afterwards."""
    tag = f"{os.getpid() % 100_000}"
    subnet = f"10.213.{os.getpid() % 250}"
    made = Link(f"boltmq-{tag}", f"bq{tag}h", f"{subnet}.1", f"{subnet}.2")
    with veth_namespace(
        made.namespace, made.host_end, f"bq{tag}s", [f"{made.host_ip}/30"],
        f"{made.namespace_ip}/30",
    ):  # fmt: skip
        yield made


async def start_pair(tmp_path: Path, link: Link, **master_settings: str) -> tuple[Node, Node, Node]:
    registry = registry_node(tmp_path, bind="0.0.0.0")
    await registry.start()
    namesrv = f"{link.host_ip}:{registry.port}"
    master = broker_node(
        tmp_path, "broker-a-0", namesrv, bindAddress="0.0.0.0", brokerIP1=link.host_ip,
        **master_settings,
    )  # fmt: skip
    slave = broker_node(
        tmp_path, "broker-a-1", namesrv, host=link.namespace_ip, prefix=link.prefix(),
        bindAddress="0.0.0.0", brokerIP1=link.namespace_ip, brokerId=1, brokerRole="SLAVE",
    )  # fmt: skip
    for node in (master, slave):
        await node.start()
    return registry, master, slave


async def test_a_partitioned_slave_times_sends_out_and_catches_up(
    tmp_path: Path, link: Link
) -> None:
    registry, master, slave = await start_pair(
        tmp_path, link, brokerRole="SYNC_MASTER", slaveTimeout="1000",
        haHousekeepingInterval="60000",
    )  # fmt: skip
    try:
        async with RemotingClient() as client:

            async def send_ok() -> bool:
                answer = await call(client, master.address, send_request(TOPIC, b"linked"))
                return answer.code == ResponseCode.SUCCESS

            await wait_until(send_ok, 60, "SEND_OK from the SYNC_MASTER with its slave linked")
            assert run("ip", "link", "set", link.host_end, "down").returncode == 0
            codes = []
            for n in range(5):
                with trio.fail_after(20):  # an answer, not a hang
                    answer = await call(client, master.address,
                                        send_request(TOPIC, f"cut-{n}".encode()))  # fmt: skip
                codes.append(answer.code)
            assert set(codes) == {ResponseCode.FLUSH_SLAVE_TIMEOUT}, codes
            assert run("ip", "link", "set", link.host_end, "up").returncode == 0
            on_master = await max_offset(client, master.address, TOPIC, 0)

            async def caught_up() -> bool:
                try:
                    return await max_offset(client, slave.address, TOPIC, 0) == on_master
                except Exception:
                    return False

            await wait_until(caught_up, 60, "the slave catching up after the partition")
            await wait_until(send_ok, 60, "SEND_OK again once the slave is back")
    finally:
        for node in (slave, master, registry):
            await node.stop()


@pytest.fixture
def slow_link(link: Link) -> Link:
    """``link`` with 50 ms of delay and 5 % loss on its host end (tc netem)."""
    netem = run("tc", "qdisc", "add", "dev", link.host_end, "root", "netem", "delay", "50ms",
                "loss", "5%")  # fmt: skip
    if netem.returncode != 0:
        pytest.skip(f"tc netem is not available here ({netem.stderr.strip()}): it needs the "
                    "sch_netem kernel module")  # fmt: skip
    return link


async def test_delay_and_loss_between_master_and_slave(tmp_path: Path, slow_link: Link) -> None:
    link = slow_link
    registry, master, slave = await start_pair(tmp_path, link, brokerRole="ASYNC_MASTER")
    try:
        async with RemotingClient() as client:
            for n in range(200):
                answer = await call(client, master.address,
                                    send_request(TOPIC, f"slow-{n}".encode()))  # fmt: skip
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            on_master = await max_offset(client, master.address, TOPIC, 0)

            async def caught_up() -> bool:
                try:
                    return await max_offset(client, slave.address, TOPIC, 0) == on_master
                except Exception:
                    return False

            await wait_until(caught_up, 90, "the slave catching up over a slow, lossy link")
    finally:
        for node in (slave, master, registry):
            await node.stop()


async def test_a_client_cut_off_from_its_broker_gets_errors_not_hangs_and_recovers(
    tmp_path: Path, link: Link
) -> None:
    registry = registry_node(tmp_path, bind="0.0.0.0")
    await registry.start()
    broker = broker_node(
        tmp_path, "broker-a-0", f"{link.host_ip}:{registry.port}", host=link.namespace_ip,
        prefix=link.prefix(), bindAddress="0.0.0.0", brokerIP1=link.namespace_ip,
    )  # fmt: skip
    await broker.start()
    try:
        async with Producer(
            "CutProducer", namesrv_addr=registry.address, send_msg_timeout=2.0,
            retry_times_when_send_failed=0,
        ) as producer:  # fmt: skip

            async def send_ok() -> bool:
                try:
                    result = await producer.send(Message(TOPIC, b"through"))
                except Exception:
                    return False
                return result.status is SendStatus.SEND_OK

            await wait_until(send_ok, 60, "a send through the link")
            assert run("ip", "link", "set", link.host_end, "down").returncode == 0
            for _ in range(3):
                with trio.fail_after(20), pytest.raises(MQClientError):  # an error, not a hang
                    await producer.send(Message(TOPIC, b"cut"))
            assert run("ip", "link", "set", link.host_end, "up").returncode == 0
            await wait_until(send_ok, 60, "sends through the link once it is back")
    finally:
        for node in (broker, registry):
            await node.stop()
