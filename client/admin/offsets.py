"""Consumer offset calls: clone a group's offsets, reset them to an offset or a time."""

from __future__ import annotations

from collections.abc import Mapping

from client.admin.core import AdminCore, broker_queues, master_addresses
from client.instance import MASTER_ID
from client.message import MQClientError
from protocol.bodies import MessageQueue, ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import CloneGroupOffsetRequestHeader, ResetOffsetRequestHeader, encode_header


class OffsetCalls(AdminCore):
    """A group's committed offsets moved: cloned, reset to an offset or to a time."""

    async def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str, *, offline: bool = False
    ) -> list[str]:
        """Copy ``src_group``'s offsets on ``topic`` to ``dest_group`` (CLONE_GROUP_OFFSET)."""
        route = await self.route(topic)
        header = CloneGroupOffsetRequestHeader(
            src_group=src_group, dest_group=dest_group, topic=topic, offline=offline
        )
        addresses = master_addresses(route)
        for address in addresses:
            await self._broker(address, RequestCode.CLONE_GROUP_OFFSET, header)
        return addresses

    async def reset_offset(
        self,
        group: str,
        topic: str,
        offset: int,
        *,
        queue_id: int | None = None,
        broker_name: str | None = None,
    ) -> dict[MessageQueue, int]:
        """Move ``group`` on ``topic`` to ``offset`` on every queue (or one queue).

        Explicit offsets go beyond RocketMQ 4.x: a BoltMQ broker (or RocketMQ 5) takes them.
        A broker refuses the whole reset when ``offset`` lies outside a queue's [min, max].
        """
        route = await self.route(topic)
        table: dict[MessageQueue, int] = {}
        for broker, queues in broker_queues(route):
            if broker_name is not None and broker.broker_name != broker_name:
                continue
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            if queue_id is not None and queue_id >= queues:
                continue
            ids = range(queues) if queue_id is None else [queue_id]
            wanted = {
                MessageQueue(topic=topic, broker_name=broker.broker_name, queue_id=i): offset
                for i in ids
            }
            header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=0, is_force=True)
            request = RemotingCommand.request(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                encode_header(header),
                ResetOffsetBody(offset_table=wanted).to_json(),
            )
            response = await self._invoke_broker(address, request, f"reset {group} on {topic}")
            done = ResetOffsetBody.from_json(response.body or b"{}").offset_table
            if done != wanted:
                # A RocketMQ 4.x broker ignores the table and resets by the header's time.
                raise MQClientError(
                    ResponseCode.SYSTEM_ERROR,
                    f"broker {broker.broker_name} at {address} did not take explicit offsets "
                    f"(it set {offsets_text(done)}); it may be a RocketMQ 4.x broker, which "
                    "only resets by time",
                )
            table.update(done)
        if not table:
            where = f"queue {queue_id}" if queue_id is not None else "queues"
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"topic {topic} has no such {where}"
                + (f" on broker {broker_name}" if broker_name else ""),
            )
        return table

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group`` on ``topic`` to the offsets stored at ``timestamp_ms`` (-1 = the end)."""
        route = await self.route(topic)
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms, is_force=force
        )
        table: dict[MessageQueue, int] = {}
        for broker in route.broker_datas:
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            code = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
            response = await self._broker(address, code, header)
            if response.body:
                table.update(ResetOffsetBody.from_json(response.body).offset_table)
        return table


def offsets_text(table: Mapping[MessageQueue, int]) -> str:
    return ", ".join(f"queue {q.queue_id}: {o}" for q, o in sorted(
        table.items(), key=lambda item: item[0].queue_id)) or "nothing"  # fmt: skip
