"""Whole-broker admin reads addressed to one broker, each one request, counted.

A monitor refreshing every second cannot afford one request per topic or group, so it asks
each broker for whole tables instead: runtime info, every topic config, every subscription
group, every consumer offset. `BrokerReads` sends them to one address and counts every request
it makes (``requests``), so a caller can report and bound its cost per refresh. The reads
`Admin` already has (runtime info, topic and group tables) go through it; the ones here are
those it lacks in a one-address form (a given registry's cluster info, every consumer
offset, one broker's stats of one topic or group, one broker's view of a group's consumers)
the one read of every producer on a broker, a consumer's running info relayed by a
broker, and a controller's leader and every group's SyncStateSet (controller mode).

    reads = BrokerReads(instance)
    info = await reads.runtime_info("127.0.0.1:10911")
    print(reads.requests)
"""

from __future__ import annotations

from client.admin import Admin
from client.instance import ClientInstance
from client.message import MQClientError
from protocol.bodies import (
    BrokerReplicasInfo,
    ClusterInfo,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumerRunningInfo,
    ConsumeStats,
    ProducerTableInfo,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicStatsTable,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetMetaDataResponseHeader,
    GetTopicStatsInfoRequestHeader,
    encode_header,
)


class BrokerReads:
    """Counted whole-table reads of one broker or registry at a time."""

    def __init__(self, instance: ClientInstance, *, timeout: float = 3.0) -> None:
        self.instance = instance
        self.admin = Admin(instance=instance, timeout=timeout)
        self.timeout = timeout
        #: Requests sent so far (answered or not).
        self.requests = 0

    async def controller_metadata(self, controller_addr: str) -> GetMetaDataResponseHeader:
        """CONTROLLER_GET_METADATA_INFO at the first of ``controller_addr``'s controllers
        that answers (controller mode)."""
        self.requests += 1
        return await self.admin.controller_metadata(controller_addr)

    async def sync_state_data(
        self, controller_addr: str, broker_names: list[str]
    ) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA of every group named that the controller knows, in
        one request (controller mode)."""
        self.requests += 1
        return await self.admin.sync_state_data(controller_addr, broker_names, require_all=False)

    async def cluster_info(self, registry: str) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO at one registry (not round robin: its liveness is wanted)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        self.requests += 1
        response = await self.instance.remoting.invoke(registry, request, self.timeout)
        return ClusterInfo.from_json(_body(response, f"cluster info at registry {registry}"))

    async def runtime_info(self, address: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's key/value runtime table."""
        self.requests += 1
        return await self.admin.broker_runtime_info(address)

    async def all_topic_config(self, address: str) -> TopicConfigSerializeWrapper:
        """GET_ALL_TOPIC_CONFIG: every topic the broker has, with its queue numbers."""
        self.requests += 1
        return await self.admin.all_topic_config(address)

    async def all_group_config(self, address: str) -> SubscriptionGroupWrapper:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every subscription group of the broker."""
        self.requests += 1
        return await self.admin.all_group_config(address)

    async def all_consumer_offset(self, address: str) -> dict[str, dict[int, int]]:
        """GET_ALL_CONSUMER_OFFSET: ``topic@group`` -> queue id -> committed offset."""
        code = RequestCode.GET_ALL_CONSUMER_OFFSET
        body = await self._call(address, code, None, "consumer offsets")
        return ConsumerOffsetSerializeWrapper.from_json(body).offset_table

    async def all_producer_info(self, address: str) -> ProducerTableInfo | None:
        """GET_ALL_PRODUCER_INFO: every producer group and its connections; None when the
        broker does not serve the request (RocketMQ 4.x answers REQUEST_CODE_NOT_SUPPORTED)."""
        self.requests += 1
        try:
            return await self.admin.all_producer_info(address)
        except MQClientError as exc:
            if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return None
            raise

    async def topic_stats(self, address: str, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO of one topic at one broker."""
        header = GetTopicStatsInfoRequestHeader(topic=topic)
        code = RequestCode.GET_TOPIC_STATS_INFO
        body = await self._call(address, code, header, f"stats of topic {topic}")
        return TopicStatsTable.from_json(body)

    async def consume_stats(self, address: str, group: str) -> ConsumeStats:
        """GET_CONSUME_STATS of one group (every topic it has offsets for) at one broker."""
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=None)
        code = RequestCode.GET_CONSUME_STATS
        body = await self._call(address, code, header, f"consume stats of group {group}")
        return ConsumeStats.from_json(body)

    async def consumer_connection(self, address: str, group: str) -> ConsumerConnection | None:
        """GET_CONSUMER_CONNECTION_LIST of one group; None when no consumer of it is online."""
        header = GetConsumerConnectionListRequestHeader(consumer_group=group)
        request = RemotingCommand.request(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, encode_header(header)
        )
        self.requests += 1
        response = await self.instance.invoke_broker(address, request, self.timeout)
        if response.code != ResponseCode.SUCCESS or not response.body:
            return None  # CONSUMER_NOT_ONLINE: an answer, not a failure
        return ConsumerConnection.from_json(response.body)

    async def consumer_running_info(
        self, address: str, group: str, client_id: str
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of one consumer, relayed by the broker at ``address``."""
        header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id)
        code = RequestCode.GET_CONSUMER_RUNNING_INFO
        body = await self._call(address, code, header, f"running info of {client_id}")
        return ConsumerRunningInfo.from_json(body)

    async def _call(self, address: str, code: int, header: object | None, what: str) -> bytes:
        request = RemotingCommand.request(
            code, encode_header(header) if header is not None else None
        )
        self.requests += 1
        response = await self.instance.invoke_broker(address, request, self.timeout)
        return _body(response, f"{what} at {address}")


def _body(response: RemotingCommand, what: str) -> bytes:
    if response.code != ResponseCode.SUCCESS:
        raise MQClientError(response.code, f"{what}: {response.remark}")
    return bytes(response.body or b"{}")
