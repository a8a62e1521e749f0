"""Controller mode's replica safety on the master's HA service: the hello that names a slave,
the in-sync slaves, allAckInSyncStateSet waits for every confirmed member, the
minInSyncReplicas refusal and fencing.

Real brokers (a SYNC master and two slaves, each on its own store in tmp_path) where the test
is about real replication; a hand-driven slave (a plain TCP socket speaking the HA protocol)
where it must decide exactly when the master hears an acknowledgement. Loopback only,
ephemeral ports, every wait with a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.ha.master import HELLO, HELLO_MARKER, hello
from protocol import RemotingClient, RemotingCommand, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    REPORT,
    broker_config,
    master_service,
    sync_master_with_hand_slave,
    wait_for,
)
from tests.actors.broker.helpers import call, send_request

MASTER_ID = 1


@asynccontextmanager
async def sync_master(root: Path, **settings: Any) -> AsyncIterator[Broker]:
    """A SYNC master (controller id 1) with allAckInSyncStateSet, as controller mode runs it."""
    config = broker_config(
        root / "master", "", BrokerRole.SYNC_MASTER, all_ack_in_sync_state_set=True, **settings
    )
    async with open_broker(config) as master:
        master_service(master).local_broker_id = MASTER_ID
        yield master


async def start_slave(stack: AsyncExitStack, root: Path, master: Broker, broker_id: int) -> Broker:
    """A real slave that says ``broker_id`` in its hello: it learns the master's HA address
    only once its hello is set, so its first link already carries it."""
    config = broker_config(root / f"slave{broker_id}", "", BrokerRole.SLAVE, broker_id)
    slave = await stack.enter_async_context(open_broker(config))
    client = slave.ha.client
    assert client is not None
    client.hello_broker_id = broker_id
    slave.config.ha_master_address = master.config.ha_addr
    return slave


async def send(client: RemotingClient, master: Broker, body: bytes) -> RemotingCommand:
    return await call(client, master.address, send_request("Safe", body))


async def test_every_confirmed_member_must_ack_and_a_dropped_member_releases_the_wait(
    tmp_path: Path,
) -> None:
    async with (
        sync_master(tmp_path, slave_timeout=1500) as master,
        RemotingClient() as client,
        AsyncExitStack() as slave3_stack,
        AsyncExitStack() as slave2_stack,
    ):
        service = master_service(master)
        slave2 = await start_slave(slave2_stack, tmp_path, master, 2)
        slave3 = await start_slave(slave3_stack, tmp_path, master, 3)
        await wait_for(lambda: service.in_sync_slave_ids() == {2, 3})
        assert service.statistics().slave_broker_ids == (2, 3)
        assert service.sync_state_set() == {1, 2, 3}
        service.confirmed_sync_state_set = {1, 2, 3}

        response = await send(client, master, b"both")
        assert response.code == ResponseCode.SUCCESS
        # Acknowledged only when both slaves had it.
        end = master.store.get_max_phy_offset()
        assert service.slave_acked_offset(2) >= end and service.slave_acked_offset(3) >= end
        assert slave2.store.get_max_phy_offset() == slave3.store.get_max_phy_offset() == end

        await slave3_stack.aclose()  # slave 3 stops; it is still in the confirmed set
        await wait_for(lambda: service.in_sync_slave_ids() == {2})
        start = trio.current_time()
        response = await send(client, master, b"slave 3 is gone")
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert trio.current_time() - start >= 1.4
        await wait_for(
            lambda: slave2.store.get_max_phy_offset() == master.store.get_max_phy_offset()
        )

        # A put waits while 3 is confirmed, and is acknowledged once the set drops it.
        codes: list[int] = []

        async def waiting_send() -> None:
            codes.append((await send(client, master, b"released")).code)

        master.config.slave_timeout = 30_000
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_send)
            await wait_for(lambda: service.statistics().waiting_sends == 1)
            await wait_for(
                lambda: service.slave_acked_offset(2) >= master.store.get_max_phy_offset()
            )
            assert codes == []
            service.confirmed_sync_state_set = {1, 2}
        assert codes == [ResponseCode.SUCCESS]
        assert service.statistics().confirmed_sync_state_set == (1, 2)


async def test_fewer_members_than_min_in_sync_replicas_is_refused_at_once(
    tmp_path: Path,
) -> None:
    async with (
        sync_master(tmp_path, min_in_sync_replicas=2) as master,
        RemotingClient() as client,
        AsyncExitStack() as stack,
    ):
        service = master_service(master)
        await start_slave(stack, tmp_path, master, 2)
        await wait_for(lambda: service.in_sync_slave_ids() == {2})
        service.confirmed_sync_state_set = {1}
        response = await send(client, master, b"alone in the set")
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
        # Stored all the same, as any SLAVE_NOT_AVAILABLE answer: only the guarantee is missing.
        assert master.store.get_max_offset_in_queue("Safe", 0) == 1
        service.confirmed_sync_state_set = {1, 2}
        assert (await send(client, master, b"two members")).code == ResponseCode.SUCCESS


@asynccontextmanager
async def hand_slave(master: Broker, broker_id: int | None) -> AsyncIterator[trio.SocketStream]:
    """A linked hand-driven slave that says ``broker_id`` (None: a classic slave) in two
    pieces, as a slow network may deliver it, then reports offset 0."""
    host, port = master.config.ha_addr.split(":")
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        greeting = (hello(broker_id) if broker_id is not None else b"") + REPORT.pack(0)
        await stream.send_all(greeting[:5])
        await trio.sleep(0.05)  # a second segment: the master must wait for the rest
        await stream.send_all(greeting[5:])
        yield stream


async def test_hello_names_the_slave_and_a_lagging_slave_drops_out_of_sync(
    tmp_path: Path,
) -> None:
    assert HELLO.unpack(hello(7)) == (HELLO_MARKER, 7) and HELLO_MARKER < 0
    async with (
        sync_master(tmp_path, ha_max_time_slave_not_catchup=400, slave_timeout=500) as master,
        RemotingClient() as client,
        hand_slave(master, 7) as named,
        hand_slave(master, None) as _classic,
    ):
        service = master_service(master)
        await wait_for(lambda: len(service.connections) == 2)
        await wait_for(lambda: all(c.acked_offset == 0 for c in service.connections.values()))
        ids = sorted((c.slave_broker_id or -1) for c in service.connections.values())
        assert ids == [-1, 7]  # the classic slave's first report was read as an offset
        assert service.in_sync_slave_ids() == {7}

        # The master writes; slave 7 acknowledges nothing: out of sync after 400 ms.
        service.confirmed_sync_state_set = {1, 7}
        response = await send(client, master, b"unacked")
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        await wait_for(lambda: 7 not in service.in_sync_slave_ids())
        # It reports everything: in sync again at once.
        await named.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        await wait_for(lambda: service.in_sync_slave_ids() == {7})


async def test_fence_answers_waiting_puts_and_refuses_new_waits(tmp_path: Path) -> None:
    async with (
        sync_master(tmp_path, slave_timeout=30_000) as master,
        RemotingClient() as client,
        hand_slave(master, 2) as slave,
    ):
        service = master_service(master)
        await wait_for(lambda: service.in_sync_slave_ids() == {2})
        service.confirmed_sync_state_set = {1, 2}
        codes: list[int] = []

        async def waiting_send() -> None:
            codes.append((await send(client, master, b"waits")).code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_send)
            await wait_for(lambda: service.statistics().waiting_sends == 1)
            service.fence("no controller heard from for 5000 ms")
        assert codes == [ResponseCode.FLUSH_SLAVE_TIMEOUT]
        assert service.statistics().fenced.startswith("no controller")
        refused = await send(client, master, b"after the fence")
        assert refused.code == ResponseCode.SLAVE_NOT_AVAILABLE
        # A late acknowledgement of everything changes nothing while fenced.
        await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        assert (await send(client, master, b"still fenced")).code == (
            ResponseCode.SLAVE_NOT_AVAILABLE
        )
        service.unfence()
        await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        await wait_for(lambda: service.slave_acked_offset(2) == master.store.get_max_phy_offset())
        codes.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_send)
            await wait_for(lambda: service.statistics().waiting_sends == 1)
            await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        assert codes == [ResponseCode.SUCCESS]


async def test_without_a_sync_state_set_any_one_slave_acks_as_before(tmp_path: Path) -> None:
    # allAckInSyncStateSet on a broker that knows no SyncStateSet (not in controller mode):
    # the classic SYNC_MASTER wait, answered by the one classic slave's report.
    async with sync_master_with_hand_slave(tmp_path, all_ack_in_sync_state_set=True) as (
        master,
        slave,
        client,
    ):
        service = master_service(master)
        codes: list[int] = []

        async def waiting_send() -> None:
            codes.append((await send(client, master, b"classic")).code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_send)
            await wait_for(lambda: service.statistics().waiting_sends == 1)
            await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        assert codes == [ResponseCode.SUCCESS]


async def test_only_a_live_link_acknowledges_for_a_member(tmp_path: Path) -> None:
    # A member whose link ends and comes back with less (it truncated, say) acknowledges only
    # what its new link reports: nothing it said on the old link counts any more.
    async with (
        sync_master(tmp_path, slave_timeout=30_000) as master,
        RemotingClient() as client,
    ):
        service = master_service(master)
        service.confirmed_sync_state_set = {1, 2}
        async with hand_slave(master, 2) as first:
            await wait_for(lambda: service.slave_acked_offset(2) == 0)
            codes: list[int] = []

            async def waiting_send(body: bytes) -> None:
                codes.append((await send(client, master, body)).code)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiting_send, b"one")
                await wait_for(lambda: service.statistics().waiting_sends == 1)
                # A log longer than the master's (as after an earlier term): covers "two" too.
                await first.send_all(REPORT.pack(master.store.get_max_phy_offset() + 100_000))
            assert codes == [ResponseCode.SUCCESS]
        await wait_for(lambda: service.slave_acked_offset(2) == -1)
        async with trio.open_nursery() as nursery:
            # Sent while slave 2 has no link: the old link's report does not count.
            nursery.start_soon(waiting_send, b"two")
            await wait_for(lambda: service.statistics().waiting_sends == 1)
            async with hand_slave(master, 2) as second:
                await wait_for(lambda: service.slave_acked_offset(2) == 0)
                assert codes == [ResponseCode.SUCCESS]
                await second.send_all(REPORT.pack(master.store.get_max_phy_offset()))
                await wait_for(lambda: len(codes) == 2)
        assert codes == [ResponseCode.SUCCESS] * 2
