"""Calls addressed to one broker: its runtime info, config, tables and statistics."""

from __future__ import annotations

from collections.abc import Mapping

from client.admin.core import AdminCore, parse_properties
from protocol.bodies import (
    BrokerStatsData,
    ConsumerOffsetSerializeWrapper,
    KVTable,
    ProducerTableInfo,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.headers import ViewBrokerStatsDataRequestHeader, encode_header


class BrokerCalls(AdminCore):
    """One broker's runtime info, settings, whole tables and statistics windows."""

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """The broker's runtime KV table (GET_BROKER_RUNTIME_INFO): versions, TPS, disk."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        response = await self._invoke_broker(broker_addr, request, "runtime info")
        return dict(KVTable.from_json(response.body or b"{}").table)

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """The broker's settings as RocketMQ names them (GET_BROKER_CONFIG)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
        response = await self._invoke_broker(broker_addr, request, "broker config")
        return parse_properties(bytes(response.body or b"").decode("utf-8", "replace"))

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

    async def all_producer_info(self, broker_addr: str) -> ProducerTableInfo:
        """Every producer group on a broker and its connections (GET_ALL_PRODUCER_INFO, 5.x).

        A broker without the request (RocketMQ 4.x) raises MQClientError with
        REQUEST_CODE_NOT_SUPPORTED.
        """
        request = RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO)
        response = await self._invoke_broker(broker_addr, request, "producer info")
        return ProducerTableInfo.from_json(response.body or b"{}")

    async def broker_stats(
        self, broker_addr: str, stats_name: str, stats_key: str
    ) -> BrokerStatsData:
        """One statistic's minute, hour and day windows (VIEW_BROKER_STATS_DATA)."""
        header = ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key)
        request = RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA, encode_header(header))
        response = await self._invoke_broker(broker_addr, request, f"stats {stats_name}")
        return BrokerStatsData.from_json(response.body or b"{}")
