"""Topic calls: create, delete, list, queue offsets and who consumes a topic."""

from __future__ import annotations

from client.admin.core import AdminCore, check_response, master_addresses
from client.instance import MASTER_ID
from protocol import names
from protocol.bodies import (
    PERM_READ,
    PERM_WRITE,
    GroupList,
    TopicConfig,
    TopicList,
    TopicStatsTable,
    alter_attributes,
    format_attribute_changes,
    parse_attribute_changes,
)
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    encode_header,
)


class TopicCalls(AdminCore):
    """Topics created or updated on masters, deleted everywhere, listed and inspected."""

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
        attributes: str | None = None,
    ) -> list[str]:
        """Create or update ``topic`` on every master of ``cluster`` (or on one broker).

        ``read_queue_nums`` and ``write_queue_nums`` override ``queue_nums`` one side each.
        ``attributes`` are RocketMQ 5's attribute changes, as mqadmin's ``-a`` takes them:
        ``"+message.type=FIFO"`` sets a key, ``"-key"`` removes one; the string is checked
        here (`TopicAttributeError`) before any broker is asked, and each broker checks the
        keys and values again.
        """
        if attributes:
            # Fail before the first broker changes, not half-way through a cluster.
            changes = parse_attribute_changes(attributes)
            alter_attributes({}, {k: v for k, v in changes.items() if k[0] == "+"}, create=True)
            attributes = format_attribute_changes(changes)
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
            read_queue_nums=queue_nums if read_queue_nums is None else read_queue_nums,
            write_queue_nums=queue_nums if write_queue_nums is None else write_queue_nums,
            perm=perm, topic_filter_type="SINGLE_TAG",
            topic_sys_flag=0, order=order, attributes=attributes or None,
        )  # fmt: skip
        addresses = await self._targets(cluster, broker_addr)
        for address in addresses:
            await self._broker(address, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return addresses

    async def get_topic_config(self, broker_addr: str, topic: str) -> TopicConfig:
        """``topic``'s config on the broker at ``broker_addr``, with its RocketMQ 5
        attributes (GET_TOPIC_CONFIG); `MQClientError` (TOPIC_NOT_EXIST) when it has none."""
        response = await self._broker(
            broker_addr, RequestCode.GET_TOPIC_CONFIG, GetTopicConfigRequestHeader(topic=topic)
        )
        return TopicConfig.from_json(response.body or b"{}")

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
            check_response(response, f"delete {topic} at registry {registry}")
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

    async def topic_list(self) -> list[str]:
        """Every topic the registry knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted."""
        request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        response = await self._registry(request)
        return sorted(TopicList.from_json(response.body or b"{}").topic_list)

    async def topic_consumed_by(self, topic: str) -> list[str]:
        """Groups that consume ``topic`` or hold offsets on it (QUERY_TOPIC_CONSUME_BY_WHO)."""
        route = await self.route(topic)
        header = QueryTopicConsumeByWhoRequestHeader(topic=topic)
        groups: set[str] = set()
        for address in master_addresses(route):
            response = await self._broker(address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header)
            groups.update(GroupList.from_json(response.body or b"{}").group_list)
        return sorted(groups)
