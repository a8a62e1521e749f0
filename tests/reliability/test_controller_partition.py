"""A master cut from its controller but not from its clients fences itself; the rest elect.

The master runs in a network namespace of its own, joined to the host by a veth pair whose
host end carries two addresses: one for the registry, the other brokers and the client, one
the controller listens on. A blackhole route in the namespace to the controller's address cuts
the master from the controller only (root only; skipped with the reason where the machine does
not allow it). The master keeps its slaves and its client, yet it must stop acknowledging
sends within controllerHeartBeatTimeoutMills/2 + one brokerHeartbeatInterval of the cut, which
is before the controller (heartbeat timeout, then its scan) elects a slave. After the route is
removed the old master rejoins as a slave of the new one, holding the same commit log, and
every acknowledged send, on either side of the election, is on the new master.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from protocol import RemotingClient
from tests.reliability.failover import (
    BROKER_NAME,
    ControllerGroup,
    SendLog,
    check_acked_exactly_once,
    send_to,
)
from tests.reliability.netns import run, veth_namespace
from tests.reliability.nodes import (
    SHORT_CONTROLLER_BROKER,
    controller_broker_node,
    controller_node,
    registry_node,
    wait_controller_master,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

TOPIC = "PartitionedMasterTopic"
QUEUES = 2
TIMEOUT_MS = int(SHORT_CONTROLLER_BROKER["controllerHeartBeatTimeoutMills"])
INTERVAL_MS = int(SHORT_CONTROLLER_BROKER["brokerHeartbeatInterval"])
#: The stated bound: writes stop within heartbeat timeout / 2 + one heartbeat interval.
FENCE_BOUND = TIMEOUT_MS / 2000 + INTERVAL_MS / 1000
#: What a send in flight at the fence may add (one answer on loopback, a busy machine).
IN_FLIGHT = 0.5


@attrs.frozen
class Net:
    """A namespace for the master and the veth pair joining it to the host."""

    namespace: str
    host_end: str
    host_ip: str
    controller_ip: str
    namespace_ip: str

    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside the namespace."""
        return ("ip", "netns", "exec", self.namespace)


@pytest.fixture
def net() -> Iterator[Net]:
    """A fresh namespace, a veth pair, two host addresses; removed afterwards."""
    tag = f"{os.getpid() % 100_000}"
    subnet = f"10.214.{os.getpid() % 250}"
    made = Net(f"bqc-{tag}", f"bqc{tag}h", f"{subnet}.1", f"{subnet}.3", f"{subnet}.2")
    with veth_namespace(
        made.namespace, made.host_end, f"bqc{tag}s",
        [f"{made.host_ip}/29", f"{made.controller_ip}/29"], f"{made.namespace_ip}/29",
    ):  # fmt: skip
        yield made


async def start_split_group(root: Path, net: Net) -> ControllerGroup:
    """Registry and controller on the host, the first broker (the master) in the namespace."""
    registry = registry_node(root, bind="0.0.0.0")
    controller = controller_node(root, bindAddress="0.0.0.0")
    group = ControllerGroup(root, registry, [controller], [])
    namesrv = f"{net.host_ip}:{registry.port}"
    controller_addr = f"{net.controller_ip}:{controller.port}"
    try:
        await registry.start()
        await controller.start()
        common = {"bindAddress": "0.0.0.0", "allAckInSyncStateSet": "true"}
        master = controller_broker_node(
            root, "broker-a-0", namesrv, controller_addr, host=net.namespace_ip,
            prefix=net.prefix(), brokerIP1=net.namespace_ip, **common,
        )  # fmt: skip
        group.brokers.append(master)
        await master.start()
        async with RemotingClient() as client:
            # The first broker of a new group is its master; the slaves come after.
            info = await wait_controller_master(client, controller_addr, BROKER_NAME)
            assert info.master_address == master.address, info
        for n in (1, 2):
            slave = controller_broker_node(
                root, f"broker-a-{n}", namesrv, controller_addr, host=net.host_ip,
                brokerIP1=net.host_ip, **common,
            )  # fmt: skip
            group.brokers.append(slave)
            await slave.start()
    except BaseException:
        await group.stop()
        raise
    # Everyone reaches the controller on its second host address.
    controller.host = net.controller_ip
    return group


async def test_a_master_cut_from_the_controller_stops_acknowledging_before_an_election(
    tmp_path: Path, net: Net
) -> None:
    group = await start_split_group(tmp_path, net)
    old = group.brokers[0]
    log = SendLog()
    cut_at = 0.0
    try:
        async with RemotingClient() as client:
            _, before = await group.wait_master(client)
            await group.wait_in_sync(client, 3)
            await group.create_topic(client, TOPIC, old, QUEUES)

            async def load(target: list[str]) -> None:
                n = 0
                while True:
                    await send_to(client, target[0], TOPIC, f"m-{n}".encode(), n % QUEUES, log)
                    n += 1
                    await trio.sleep(0.02)

            target = [old.address]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load, target)
                await wait_until(lambda: len(log.acked) >= 40, 60, "40 sends acknowledged")
                cut = run(*net.prefix(), "ip", "route", "add", "blackhole",
                          f"{net.controller_ip}/32")  # fmt: skip
                cut_at = time.monotonic()
                assert cut.returncode == 0, cut.stderr

                new, after = await group.wait_master(
                    client, not_address=old.address, above_epoch=before.master_epoch,
                    timeout=60,
                )  # fmt: skip
                elected_at = time.monotonic()
                last_ack_on_old = max(a.at for a in log.acked)
                fenced_in = last_ack_on_old - cut_at
                print(
                    f"\nmaster cut from the controller: last acknowledged send {fenced_in:.2f} s "
                    f"after the cut (bound {FENCE_BOUND:.1f} s), new master "
                    f"{new.address} elected {elected_at - cut_at:.2f} s after it; refusal: "
                    f"{log.failures[-1][1] if log.failures else None}"
                )
                assert fenced_in <= FENCE_BOUND + IN_FLIGHT, fenced_in
                assert last_ack_on_old < elected_at
                # The fenced master refuses with a reason, it does not hang.
                assert log.failures and log.failures[-1][0] > last_ack_on_old
                target[0] = new.address
                await wait_until(lambda: log.acked_after(elected_at) >= 40, 60,
                                 "40 sends acknowledged by the new master")  # fmt: skip
                nursery.cancel_scope.cancel()
            assert after.master_epoch > before.master_epoch

            healed = run(*net.prefix(), "ip", "route", "del", "blackhole",
                         f"{net.controller_ip}/32")  # fmt: skip
            assert healed.returncode == 0, healed.stderr

            await group.wait_same_log(client, old, new)
            truncated = [line for line in old.log_text().splitlines() if "truncated commit" in line]
            print(f"old master rejoined as a slave; {truncated[-1] if truncated else 'no tail'}")
            info = await group.replica_info(client)
            assert info is not None and info.master_address == new.address
            stored = await group.read_topic(client, new, TOPIC)
            check_acked_exactly_once(log.acked, stored)
    finally:
        run(*net.prefix(), "ip", "route", "del", "blackhole", f"{net.controller_ip}/32")
        await group.stop()
