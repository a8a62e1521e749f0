"""Slave config sync: topics, consumer offsets, delay offsets and groups copied and persisted.

Real registry, master and slave on loopback; the slave learns its master's addresses from its
registration answer. Every wait has a deadline.
"""

from __future__ import annotations

from pathlib import Path

from actors.broker.broker import open_broker
from actors.broker.tables.groups import UpdateGroup
from actors.broker.tables.offsets import CommitOffsets
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import SubscriptionGroupConfig
from storage import BrokerRole
from tests.actors.broker.ha.helpers import broker_config, running_registry, running_slave, wait_for
from tests.actors.broker.helpers import call, send_request


async def test_slave_copies_and_persists_the_master_tables(tmp_path: Path) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER)
        async with open_broker(config) as master:
            response = await call(client, master.address, send_request("SyncedTopic", b"x"))
            assert response.code == ResponseCode.SUCCESS
            await master.offsets.call(CommitOffsets("SyncedGroup", "SyncedTopic", {0: 1}))
            await master.groups.call(
                UpdateGroup(SubscriptionGroupConfig(group_name="SyncedGroup", retry_max_times=3))
            )
            master.schedule.delay_offsets.offset_table[2] = 0
            delay = await call(
                client, master.address, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET)
            )
            assert delay.code == ResponseCode.SUCCESS

            async with running_slave(
                tmp_path / "slave", registry.address, flush_consumer_offset_interval=100
            ) as slave:
                assert slave.registrar is not None
                assert slave.registrar.master_addr == master.address
                assert slave.registrar.master_ha_addr == master.config.ha_addr
                sync = slave.ha.sync
                assert sync is not None and await sync.sync_all()
                assert slave.topics.select("SyncedTopic") is not None
                assert slave.topics.data_version == master.topics.data_version
                assert slave.offsets.query_offset("SyncedGroup", "SyncedTopic", 0) == 1
                group = slave.groups.find_subscription_group_config("SyncedGroup")
                assert group is not None and group.retry_max_times == 3
                assert slave.schedule.delay_offsets.offset_table.get(2) == 0

                offsets_file = slave.config.config_dir / "consumerOffset.json"

                await wait_for(
                    lambda: (
                        offsets_file.exists()
                        and "SyncedTopic@SyncedGroup" in offsets_file.read_text()
                    )
                )
                topics_file = slave.config.config_dir / "topics.json"
                await wait_for(lambda: "SyncedTopic" in topics_file.read_text())
