"""Group calls: consumer and producer groups, their connections, progress and lag.

The system group names are protocol.names' (RocketMQ's MixAll), re-exported here for the
callers that filter them.
"""

from __future__ import annotations

import attrs

from client.admin.brokers import BrokerCalls
from client.admin.core import check_response, master_addresses
from client.instance import MASTER_ID
from client.message import MQClientError
from protocol import names
from protocol.bodies import (
    Connection,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    PopConsumeStats,
    ProducerConnection,
    SubscriptionGroupConfig,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    encode_header,
)

#: Consumer groups RocketMQ brokers create for themselves and their tools (MixAll's names).
SYSTEM_CONSUMER_GROUPS = frozenset(
    {*names.BROKER_SYSTEM_GROUPS, names.MONITOR_CONSUMER_GROUP, names.DEFAULT_CONSUMER_GROUP}
)
#: Groups with this prefix are the brokers' own (``CID_RMQ_SYS_TRANS`` and the like).
SYSTEM_CONSUMER_GROUP_PREFIX = names.CID_RMQ_SYS_PREFIX
#: Whether a group is one of the brokers' or tools' own.
is_system_group = names.is_system_group


@attrs.frozen
class GroupConsumeStats:
    """Consume progress of a group, summed over the brokers: per-queue offsets and total lag."""

    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float
    #: A group that pops (RocketMQ 5): its figures per topic, summed over the brokers;
    #: empty for other groups.
    pop_stats: dict[str, PopConsumeStats] = attrs.Factory(dict)

    @property
    def pops(self) -> bool:
        """Whether the group consumes by pop on some broker."""
        return bool(self.pop_stats)

    @property
    def lag(self) -> int:
        """Messages written but not yet consumed (broker offset minus consumer offset)."""
        return sum(max(0, w.broker_offset - w.consumer_offset) for w in self.offset_table.values())


class GroupCalls(BrokerCalls):
    """Consumer groups created, deleted and inspected; producer groups' connections."""

    async def create_group(
        self,
        config: SubscriptionGroupConfig | str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Create or update a consumer group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        if isinstance(config, str):
            config = SubscriptionGroupConfig(group_name=config)
        addresses = await self._targets(cluster, broker_addr)
        for address in addresses:
            request = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.to_json()
            )
            check_response(await self.instance.invoke_broker(address, request, self.timeout),
                   f"create group {config.group_name} at {address}")  # fmt: skip
        return addresses

    async def delete_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        remove_offset: bool = True,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Delete a consumer group (and its offsets) on the masters of ``cluster`` (or one)."""
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset)
        addresses = await self._targets(cluster, broker_addr)
        for address in addresses:
            await self._broker(address, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
        return addresses

    async def consume_stats(self, group: str, topic: str | None = None) -> GroupConsumeStats:
        """Broker and consumer offsets per queue of ``group`` and its lag (GET_CONSUME_STATS)."""
        if topic is not None:
            route = await self.route(topic)
            addresses = [b.broker_addrs[MASTER_ID] for b in route.broker_datas
                         if MASTER_ID in b.broker_addrs]  # fmt: skip
        else:
            addresses = list((await self.masters()).values())
        table: dict[MessageQueue, OffsetWrapper] = {}
        tps = 0.0
        pop_stats: dict[str, PopConsumeStats] = {}
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        for address in addresses:
            request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, encode_header(header))
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code != ResponseCode.SUCCESS:
                continue  # a broker without this group's offsets has nothing to add
            stats = ConsumeStats.from_json(response.body or b"{}")
            table.update(stats.offset_table)
            tps += stats.consume_tps
            for line in stats.pop_stats or ():
                pop_stats[line.topic] = _add_pop(pop_stats.get(line.topic), line)
        return GroupConsumeStats(table, tps, pop_stats)

    async def consumer_connections(self, group: str) -> ConsumerConnection:
        """Live consumers of ``group`` (GET_CONSUMER_CONNECTION_LIST), from the first that knows."""
        header = GetConsumerConnectionListRequestHeader(consumer_group=group)
        last = "no broker"
        for address in (await self.masters()).values():
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, encode_header(header)
            )
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code == ResponseCode.SUCCESS and response.body:
                return ConsumerConnection.from_json(response.body)
            last = response.remark or str(response.code)
        raise MQClientError(ResponseCode.CONSUMER_NOT_ONLINE, f"group {group} not online: {last}")

    async def consumer_groups(self) -> list[str]:
        """Every consumer group the masters know, from their subscription group tables and
        their committed offsets (a group that only committed offsets has no config), sorted."""
        groups: set[str] = set()
        for address in (await self.masters()).values():
            groups.update((await self.all_group_config(address)).subscription_group_table)
            for key in (await self.all_consumer_offset(address)).offset_table:
                groups.add(key.rpartition("@")[2])
        groups.discard("")
        return sorted(groups)

    async def producer_connections(self, group: str, topic: str) -> ProducerConnection:
        """Live producers of ``group`` (GET_PRODUCER_CONNECTION_LIST) at ``topic``'s masters."""
        route = await self.route(topic)
        header = GetProducerConnectionListRequestHeader(producer_group=group)
        found: dict[str, Connection] = {}
        last = "no master broker"
        for address in master_addresses(route):
            request = RemotingCommand.request(
                RequestCode.GET_PRODUCER_CONNECTION_LIST, encode_header(header)
            )
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code == ResponseCode.SUCCESS and response.body:
                for connection in ProducerConnection.from_json(response.body).connection_set:
                    found.setdefault(connection.client_id, connection)
            else:
                last = response.remark or str(response.code)
        if not found:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR, f"producer group {group} is not online: {last}"
            )
        return ProducerConnection(connection_set=list(found.values()))

    async def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """A live consumer's queues and rates, relayed by a broker (GET_CONSUMER_RUNNING_INFO)."""
        header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id)
        last = "no broker"
        for address in (await self.masters()).values():
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO, encode_header(header)
            )
            response = await self.instance.invoke_broker(address, request, self.timeout * 2)
            if response.code == ResponseCode.SUCCESS and response.body:
                return ConsumerRunningInfo.from_json(response.body)
            last = response.remark or str(response.code)
        raise MQClientError(
            ResponseCode.CONSUMER_NOT_ONLINE, f"consumer {client_id} of {group}: {last}"
        )


def _add_pop(total: PopConsumeStats | None, line: PopConsumeStats) -> PopConsumeStats:
    """Two brokers' pop figures of one topic, summed."""
    if total is None:
        return line
    return PopConsumeStats(
        topic=line.topic, ck_nums=total.ck_nums + line.ck_nums,
        ack_nums=total.ack_nums + line.ack_nums, in_flight=total.in_flight + line.in_flight,
        revive_nums=total.revive_nums + line.revive_nums,
        dlq_put_nums=total.dlq_put_nums + line.dlq_put_nums,
    )  # fmt: skip
