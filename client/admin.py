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
from collections.abc import Mapping, Sequence
from types import TracebackType

import attrs

from client.instance import MASTER_ID, ClientInstance
from client.message import MQClientError
from client.options import ConnectionOptions, connection_options
from protocol.bodies import (
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    BrokerStatsData,
    ClusterInfo,
    Connection,
    ConsumeMessageDirectlyResult,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumerRunningInfo,
    ConsumeStats,
    GroupList,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ProducerTableInfo,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    AddWritePermOfBrokerRequestHeader,
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetKVConfigRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    encode_header,
)
from protocol.message import MessageExt, decode_offset_msg_id, decode_record, iter_records

#: Consumer groups RocketMQ brokers create for themselves and their tools (MixAll's names).
SYSTEM_CONSUMER_GROUPS = frozenset({
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "__MONITOR_CONSUMER",
    "DEFAULT_CONSUMER",
})  # fmt: skip
#: Groups with this prefix are the brokers' own (``CID_RMQ_SYS_TRANS`` and the like).
SYSTEM_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"


def is_system_group(group: str) -> bool:
    """Whether ``group`` is one of the brokers' or tools' own consumer groups."""
    return group in SYSTEM_CONSUMER_GROUPS or group.startswith(SYSTEM_CONSUMER_GROUP_PREFIX)


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
        tls: bool | None = None,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        security_token: str | None = None,
        options: ConnectionOptions | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        # The seven keywords are the record's fields spelled out (client.options).
        options = connection_options(
            options,
            ConnectionOptions(
                tls=tls,
                tls_ca_file=tls_ca_file,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
                access_key=access_key,
                secret_key=secret_key,
                security_token=security_token,
            ),
        )
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "",
            timeout=timeout,
            options=options,
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
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
    ) -> list[str]:
        """Create or update ``topic`` on every master of ``cluster`` (or on one broker).

        ``read_queue_nums`` and ``write_queue_nums`` override ``queue_nums`` one side each.
        """
        header = CreateTopicRequestHeader(
            topic=topic, default_topic="TBW102",
            read_queue_nums=queue_nums if read_queue_nums is None else read_queue_nums,
            write_queue_nums=queue_nums if write_queue_nums is None else write_queue_nums,
            perm=perm, topic_filter_type="SINGLE_TAG",
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

    # -- operator calls (mqadmin's verbs) ------------------------------------------------------

    async def topic_list(self) -> list[str]:
        """Every topic the registry knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted."""
        request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        response = await self._registry(request)
        return sorted(TopicList.from_json(response.body or b"{}").topic_list)

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """The broker's runtime KV table (GET_BROKER_RUNTIME_INFO): versions, TPS, disk."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        response = await self._invoke_broker(broker_addr, request, "runtime info")
        return dict(KVTable.from_json(response.body or b"{}").table)

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """The broker's settings as RocketMQ names them (GET_BROKER_CONFIG)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
        response = await self._invoke_broker(broker_addr, request, "broker config")
        return _properties(bytes(response.body or b"").decode("utf-8", "replace"))

    async def update_broker_config(self, broker_addr: str, properties: Mapping[str, str]) -> None:
        """Change settings of a running broker (UPDATE_BROKER_CONFIG); refused ones raise."""
        text = "".join(f"{key}={value}\n" for key, value in properties.items())
        request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode())
        await self._invoke_broker(broker_addr, request, "update broker config")

    async def all_topic_config(self, broker_addr: str) -> TopicConfigSerializeWrapper:
        """The broker's whole topic table (GET_ALL_TOPIC_CONFIG)."""
        request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
        response = await self._invoke_broker(broker_addr, request, "topic configs")
        return TopicConfigSerializeWrapper.from_json(response.body or b"{}")

    async def all_group_config(self, broker_addr: str) -> SubscriptionGroupWrapper:
        """The broker's whole subscription group table (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        response = await self._invoke_broker(broker_addr, request, "group configs")
        return SubscriptionGroupWrapper.from_json(response.body or b"{}")

    async def all_consumer_offset(self, broker_addr: str) -> ConsumerOffsetSerializeWrapper:
        """The broker's committed offsets, ``topic@group`` -> queue -> offset
        (GET_ALL_CONSUMER_OFFSET)."""
        request = RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET)
        response = await self._invoke_broker(broker_addr, request, "consumer offsets")
        return ConsumerOffsetSerializeWrapper.from_json(response.body or b"{}")

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
        for address in _master_addresses(route):
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

    async def all_producer_info(self, broker_addr: str) -> ProducerTableInfo:
        """Every producer group on a broker and its connections (GET_ALL_PRODUCER_INFO, 5.x).

        A broker without the request (RocketMQ 4.x) raises MQClientError with
        REQUEST_CODE_NOT_SUPPORTED.
        """
        request = RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO)
        response = await self._invoke_broker(broker_addr, request, "producer info")
        return ProducerTableInfo.from_json(response.body or b"{}")

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

    async def broker_stats(
        self, broker_addr: str, stats_name: str, stats_key: str
    ) -> BrokerStatsData:
        """One statistic's minute, hour and day windows (VIEW_BROKER_STATS_DATA)."""
        header = ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key)
        request = RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA, encode_header(header))
        response = await self._invoke_broker(broker_addr, request, f"stats {stats_name}")
        return BrokerStatsData.from_json(response.body or b"{}")

    async def topic_consumed_by(self, topic: str) -> list[str]:
        """Groups that consume ``topic`` or hold offsets on it (QUERY_TOPIC_CONSUME_BY_WHO)."""
        route = await self.route(topic)
        header = QueryTopicConsumeByWhoRequestHeader(topic=topic)
        groups: set[str] = set()
        for address in _master_addresses(route):
            response = await self._broker(address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header)
            groups.update(GroupList.from_json(response.body or b"{}").group_list)
        return sorted(groups)

    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """Each registry's settings (GET_NAMESRV_CONFIG), by registry address."""
        configs: dict[str, dict[str, str]] = {}
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG)
            response = await self._invoke_registry_at(registry, request, "registry config")
            configs[registry] = _properties(bytes(response.body or b"").decode("utf-8", "replace"))
        return configs

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """A registry KV config value (GET_KV_CONFIG); None when it is not set."""
        header = GetKVConfigRequestHeader(namespace=namespace, key=key)
        request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, encode_header(header))
        response = await self.instance.invoke_registry(request)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        _check(response, f"get kv config {namespace}/{key}")
        return (response.ext_fields or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """Set a KV config entry in every registry (PUT_KV_CONFIG)."""
        header = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, encode_header(header))
            await self._invoke_registry_at(registry, request, f"put kv config {namespace}/{key}")

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """Remove a KV config entry from every registry (DELETE_KV_CONFIG)."""
        header = DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, encode_header(header))
            await self._invoke_registry_at(registry, request, f"delete kv config {namespace}/{key}")

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Stop writes to ``broker_name`` in every registry; topics changed, by registry."""
        header = WipeWritePermOfBrokerRequestHeader(broker_name=broker_name)
        return await self._write_perm(
            RequestCode.WIPE_WRITE_PERM_OF_BROKER, encode_header(header), "wipeTopicCount"
        )

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Allow writes to ``broker_name`` again in every registry; topics changed, by registry."""
        header = AddWritePermOfBrokerRequestHeader(broker_name=broker_name)
        return await self._write_perm(
            RequestCode.ADD_WRITE_PERM_OF_BROKER, encode_header(header), "addTopicCount"
        )

    async def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str, *, offline: bool = False
    ) -> list[str]:
        """Copy ``src_group``'s offsets on ``topic`` to ``dest_group`` (CLONE_GROUP_OFFSET)."""
        route = await self.route(topic)
        header = CloneGroupOffsetRequestHeader(
            src_group=src_group, dest_group=dest_group, topic=topic, offline=offline
        )
        addresses = _master_addresses(route)
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
        for broker, queues in _broker_queues(route):
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
                    f"(it set {_offsets_text(done)}); it may be a RocketMQ 4.x broker, which "
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

    async def consume_message_directly(
        self, group: str, client_id: str, offset_msg_id: str
    ) -> ConsumeMessageDirectlyResult:
        """Have the store host of ``offset_msg_id`` push that message to one live consumer
        of ``group`` and say how its listener took it (CONSUME_MESSAGE_DIRECTLY)."""
        (host, port), _ = decode_offset_msg_id(offset_msg_id)
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=client_id, msg_id=offset_msg_id
        )
        request = RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, encode_header(header)
        )
        # The broker relays to the consumer and waits for its listener: allow for both.
        response = await self.instance.invoke_broker(f"{host}:{port}", request, self.timeout * 2)
        _check(response, f"consume {offset_msg_id} directly at {client_id} of {group}")
        return ConsumeMessageDirectlyResult.from_json(response.body or b"{}")

    # -- internals ----------------------------------------------------------------------------

    async def _targets(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        if broker_addr is not None:
            return [broker_addr]
        addresses = list((await self.masters(cluster)).values())
        if not addresses:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "no master broker to send to")
        return addresses

    async def _invoke_broker(
        self, address: str, request: RemotingCommand, what: str
    ) -> RemotingCommand:
        response = await self.instance.invoke_broker(address, request, self.timeout)
        return _check(response, f"{what} at {address}")

    async def _invoke_registry_at(
        self, registry: str, request: RemotingCommand, what: str
    ) -> RemotingCommand:
        try:
            response = await self.instance.remoting.invoke(registry, request, self.timeout)
        except RemotingError as exc:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR, f"registry {registry} did not answer: {exc.remark}"
            ) from None
        return _check(response, f"{what} at registry {registry}")

    async def _write_perm(self, code: int, ext: dict[str, str], count_key: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for registry in self.instance.registries:
            request = RemotingCommand.request(code, dict(ext))
            response = await self._invoke_registry_at(registry, request, "write perm")
            counts[registry] = int((response.ext_fields or {}).get(count_key, "0"))
        return counts

    async def _registry(self, request: RemotingCommand) -> RemotingCommand:
        response = await self.instance.invoke_registry(request)
        return _check(response, f"{_code_name(request.code)} at a registry")

    async def _broker(self, address: str, code: int, header: object) -> RemotingCommand:
        request = RemotingCommand.request(code, encode_header(header))
        response = await self.instance.invoke_broker(address, request, self.timeout)
        return _check(response, f"{_code_name(code)} at {address}")


def _master_addresses(route: TopicRouteData) -> list[str]:
    return [b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs]


def _broker_queues(route: TopicRouteData) -> list[tuple[BrokerData, int]]:
    """Each broker of ``route`` with its queue count (the larger of read and write)."""
    counts = {q.broker_name: max(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas}
    return [(b, counts[b.broker_name]) for b in route.broker_datas if b.broker_name in counts]


def _properties(text: str) -> dict[str, str]:
    """``key=value`` lines (a Java properties text as brokers and registries write it)."""
    table: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        table[key.strip()] = value.strip()
    return table


def _offsets_text(table: Mapping[MessageQueue, int]) -> str:
    return ", ".join(f"queue {q.queue_id}: {o}" for q, o in sorted(
        table.items(), key=lambda item: item[0].queue_id)) or "nothing"  # fmt: skip


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


def _check(response: RemotingCommand, what: str) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise MQClientError(response.code, f"{what}: {response.remark}")
    return response
