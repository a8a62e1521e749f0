"""The admin client (RocketMQ's MQAdminExt): topics, groups, routes, stats, lookups, resets.

    async with Admin(namesrv_addr="127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", cluster="DefaultCluster", queue_nums=8)
        stats = await admin.consume_stats("cg", "Orders")
        print(stats.lag)

Cluster-wide calls find the cluster's masters with GET_BROKER_CLUSTER_INFO and ask each one;
route, cluster and topic deletion go to a registry (round robin, failover).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

import attrs

from client.instance import MASTER_ID, ClientInstance
from client.message import MQClientError
from protocol.bodies import (
    PERM_READ,
    PERM_WRITE,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    TopicRouteData,
    TopicStatsTable,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ViewMessageRequestHeader,
    encode_header,
)
from protocol.message import MessageExt, decode_offset_msg_id, decode_record, iter_records


@attrs.frozen
class GroupConsumeStats:
    """Consume progress of a group, summed over the brokers: per-queue offsets and total lag."""

    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float

    @property
    def lag(self) -> int:
        """Messages written but not yet consumed (broker offset minus consumer offset)."""
        return sum(max(0, w.broker_offset - w.consumer_offset) for w in self.offset_table.values())


class Admin:
    """Operator calls against a BoltMQ or RocketMQ 4.x cluster; ``async with Admin(...)``."""

    def __init__(
        self,
        *,
        namesrv_addr: str | Sequence[str] | None = None,
        instance: ClientInstance | None = None,
        timeout: float = 5.0,
        tls_ca_file: str | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "", timeout=timeout, tls_ca_file=tls_ca_file
        )
        self.timeout = timeout

    async def __aenter__(self) -> Admin:
        if self._own_instance:
            await self.instance.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._own_instance:
            await self.instance.__aexit__(exc_type, exc, tb)

    # -- cluster and routes -------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """Brokers and clusters as the registry knows them (GET_BROKER_CLUSTER_INFO)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        response = await self._registry(request)
        return ClusterInfo.from_json(response.body or b"{}")

    async def route(self, topic: str) -> TopicRouteData:
        """``topic``'s route; MQClientError(TOPIC_NOT_EXIST) when no registry knows it."""
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return route

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, for one cluster or all of them."""
        info = await self.cluster_info()
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no cluster named {cluster}")
            names = set(info.cluster_addr_table[cluster])
        else:
            names = set(info.broker_addr_table)
        masters = {}
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                masters[name] = data.broker_addrs[MASTER_ID]
        return masters

    # -- topics -------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        queue_nums: int = 8,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
    ) -> list[str]:
        """Create or update ``topic`` on every master of ``cluster`` (or on one broker)."""
        header = CreateTopicRequestHeader(
            topic=topic, default_topic="TBW102", read_queue_nums=queue_nums,
            write_queue_nums=queue_nums, perm=perm, topic_filter_type="SINGLE_TAG",
            topic_sys_flag=0, order=order,
        )  # fmt: skip
        addresses = await self._targets(cluster, broker_addr)
        for address in addresses:
            await self._broker(address, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return addresses

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        """Delete ``topic`` on the masters of ``cluster`` (all clusters) and in the registries."""
        for address in await self._targets(cluster, None):
            await self._broker(
                address, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic)
            )
        header = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        for registry in self.instance.registries:
            request = RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, encode_header(header)
            )
            response = await self.instance.remoting.invoke(registry, request, self.timeout)
            _check(response, f"delete {topic} at registry {registry}")
        self.instance.routes.pop(topic, None)

    async def topic_stats(self, topic: str) -> TopicStatsTable:
        """Min/max offsets and last update of each queue of ``topic`` (GET_TOPIC_STATS_INFO)."""
        route = await self.route(topic)
        table = {}
        for broker in route.broker_datas:
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            response = await self._broker(
                address, RequestCode.GET_TOPIC_STATS_INFO,
                GetTopicStatsInfoRequestHeader(topic=topic),
            )  # fmt: skip
            table.update(TopicStatsTable.from_json(response.body or b"{}").offset_table)
        return TopicStatsTable(offset_table=table)

    # -- groups -------------------------------------------------------------------------------

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
            _check(await self.instance.invoke_broker(address, request, self.timeout),
                   f"create group {config.group_name} at {address}")  # fmt: skip
        return addresses

    async def delete_group(
        self, group: str, *, cluster: str | None = None, remove_offset: bool = True
    ) -> None:
        """Delete a consumer group (and its offsets) on the masters of ``cluster``."""
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset)
        for address in await self._targets(cluster, None):
            await self._broker(address, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)

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
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        for address in addresses:
            request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, encode_header(header))
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code != ResponseCode.SUCCESS:
                continue  # a broker without this group's offsets has nothing to add
            stats = ConsumeStats.from_json(response.body or b"{}")
            table.update(stats.offset_table)
            tps += stats.consume_tps
        return GroupConsumeStats(table, tps)

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

    # -- messages -----------------------------------------------------------------------------

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The stored message an offset msg id names (VIEW_MESSAGE_BY_ID at its store host)."""
        (host, port), offset = decode_offset_msg_id(offset_msg_id)
        header = ViewMessageRequestHeader(offset=offset)
        response = await self._broker(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, header)
        if not response.body:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no message {offset_msg_id}")
        return decode_record(response.body)

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique_key: bool = False,
    ) -> list[MessageExt]:
        """Messages of ``topic`` with business key ``key`` (or UNIQ_KEY), from every broker."""
        route = await self.route(topic)
        header = QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
            end_timestamp=end_ms if end_ms is not None else int(time.time() * 1000) + 60_000,
            unique_key_query=unique_key,
        )  # fmt: skip
        found: list[MessageExt] = []
        for broker in route.broker_datas:
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            request = RemotingCommand.request(RequestCode.QUERY_MESSAGE, encode_header(header))
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            _check(response, f"query {topic} key {key} at {address}")
            for message in iter_records(response.body or b""):
                wanted = message.msg_id == key if unique_key else key in message.keys
                if wanted:  # the index matches by hash: drop collisions
                    found.append(message)
        return found

    # -- internals ----------------------------------------------------------------------------

    async def _targets(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        if broker_addr is not None:
            return [broker_addr]
        addresses = list((await self.masters(cluster)).values())
        if not addresses:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "no master broker to send to")
        return addresses

    async def _registry(self, request: RemotingCommand) -> RemotingCommand:
        response = await self.instance.invoke_registry(request)
        return _check(response, f"registry request {request.code}")

    async def _broker(self, address: str, code: int, header: object) -> RemotingCommand:
        request = RemotingCommand.request(code, encode_header(header))
        response = await self.instance.invoke_broker(address, request, self.timeout)
        return _check(response, f"request {code} at {address}")


def _check(response: RemotingCommand, what: str) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise MQClientError(response.code, f"{what}: {response.remark}")
    return response
