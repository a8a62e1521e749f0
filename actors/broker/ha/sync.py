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
from typing import TYPE_CHECKING

import trio

from actors.broker.groups import ReplaceGroupTable
from actors.broker.offsets import ReplaceOffsetTable
from actors.broker.topics import ReplaceTopicTable
from protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from supervisors.actor import ActorError

if TYPE_CHECKING:
    from actors.broker.service import Broker

log = logging.getLogger("boltmq.broker.ha")

_Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]

#: Seconds before the first sync and between syncs (fixed in RocketMQ too).
FIRST_SYNC_DELAY = 3.0
SYNC_PERIOD = 10.0
#: Seconds one config request may take.
SYNC_TIMEOUT = 5.0


class SlaveSynchronize:
    """Copies the master's config tables to this slave; see the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.syncs = 0
        self.failures = 0

    @property
    def master_address(self) -> str | None:
        """The master's remoting address."""
        registrar = self.broker.registrar
        if registrar is not None and registrar.master_addr:
            return registrar.master_addr
        ha = self.broker.config.ha_master_address
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
        registrar = self.broker.registrar
        if address is None or registrar is None:
            return False
        try:
            await self._sync(address, registrar.client.invoke)
        except (RemotingError, OSError, ValueError, ActorError) as exc:
            self.failures += 1
            log.warning("config sync from master %s failed: %s", address, exc)
            return False
        self.syncs += 1
        return True

    async def _sync(self, address: str, invoke: _Invoke) -> None:
        broker = self.broker

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
            await broker.topics.call(ReplaceTopicTable(wrapper))
        body = await fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)
        if body:
            offsets = ConsumerOffsetSerializeWrapper.from_json(body).offset_table
            await broker.offsets.call(ReplaceOffsetTable(offsets))
        body = await fetch(RequestCode.GET_ALL_DELAY_OFFSET)
        if body:
            broker.schedule.delay_offsets.from_json(body)
            broker.schedule.delay_offsets.mark_dirty()
        body = await fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body:
            group_wrapper = SubscriptionGroupWrapper.from_json(body)
            await broker.groups.call(ReplaceGroupTable(group_wrapper))
