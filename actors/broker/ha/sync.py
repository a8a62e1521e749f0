"""Slave config sync (RocketMQ's SlaveSynchronize).

A slave asks its master every 10 s (the first time after 3 s) for the topic table
(GET_ALL_TOPIC_CONFIG), consumer offsets (GET_ALL_CONSUMER_OFFSET), delay offsets
(GET_ALL_DELAY_OFFSET) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), overwrites
its own copies (topics and groups only when the master's data version differs; the broker's
tables through their actors, which persist them). The master's remoting address comes from the
registration answer; with only ``haMasterAddress`` configured it is the HA port minus one (the
default layout). A failed round is logged and tried again next period.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from actors.broker.config import BrokerConfig
from actors.broker.ha.slave import MasterAddresses
from actors.broker.tables.delay_offsets import DelayOffsetTable
from actors.broker.tables.groups import ReplaceGroupTable, SubscriptionGroupManager
from actors.broker.tables.offsets import ConsumerOffsetManager, ReplaceOffsetTable
from actors.broker.tables.topics import ReplaceTopicTable, TopicManager
from protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from supervisors.actor import ActorError

log = logging.getLogger("boltmq.broker.ha")

_Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]

#: Seconds before the first sync and between syncs (fixed in RocketMQ too).
FIRST_SYNC_DELAY = 3.0
SYNC_PERIOD = 10.0
#: Seconds one config request may take.
SYNC_TIMEOUT = 5.0


class SlaveSynchronize:
    """Copies the master's config tables to this slave; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        registration: MasterAddresses,
        invoke: _Invoke,
        topics: TopicManager,
        offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager,
        delay_offsets: DelayOffsetTable,
    ) -> None:
        self.ha_master_address = config.ha_master_address
        self.registration = registration
        self.invoke = invoke
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.delay_offsets = delay_offsets
        self.syncs = 0
        self.failures = 0

    @property
    def master_address(self) -> str | None:
        """The master's remoting address."""
        if self.registration.master_addr:
            return self.registration.master_addr
        ha = self.ha_master_address
        if ha and ":" in ha:
            host, port = ha.rsplit(":", 1)
            return f"{host}:{int(port) - 1}"
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sync after 3 s, then every 10 s, until cancelled."""
        task_status.started()
        await trio.sleep(FIRST_SYNC_DELAY)
        while True:
            await self.sync_all()
            await trio.sleep(SYNC_PERIOD)

    async def sync_all(self) -> bool:
        """One round over the four tables; False (logged) when the master did not answer."""
        address = self.master_address
        if address is None:
            return False
        try:
            await self._sync(address, self.invoke)
        except (RemotingError, OSError, ValueError, ActorError) as exc:
            self.failures += 1
            log.warning("config sync from master %s failed: %s", address, exc)
            return False
        self.syncs += 1
        return True

    async def _sync(self, address: str, invoke: _Invoke) -> None:

        async def fetch(code: int) -> bytes | None:
            response = await invoke(address, RemotingCommand.request(code), SYNC_TIMEOUT)
            if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return None
            if response.code != ResponseCode.SUCCESS:
                raise RemotingError(response.code, response.remark or f"request {code} refused")
            return bytes(response.body or b"")

        body = await fetch(RequestCode.GET_ALL_TOPIC_CONFIG)
        if body:
            wrapper = TopicConfigSerializeWrapper.from_json(body)
            await self.topics.call(ReplaceTopicTable(wrapper))
        body = await fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)
        if body:
            offsets = ConsumerOffsetSerializeWrapper.from_json(body).offset_table
            await self.offsets.call(ReplaceOffsetTable(offsets))
        body = await fetch(RequestCode.GET_ALL_DELAY_OFFSET)
        if body:
            self.delay_offsets.from_json(body)
            self.delay_offsets.mark_dirty()
        body = await fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body:
            group_wrapper = SubscriptionGroupWrapper.from_json(body)
            await self.groups.call(ReplaceGroupTable(group_wrapper))
