"""The admin client's core: its client instance, the cluster's masters and routes, checked requests.

Each family of calls (topics.py, groups.py, ...) is a class over `AdminCore`; `client.admin.Admin`
joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Self

from client.instance import MASTER_ID, ClientInstance
from client.message import MQClientError
from client.options import ConnectionOptions, connection_options
from protocol.bodies import BrokerData, ClusterInfo, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import encode_header


class AdminCore:
    """What every family of admin calls stands on: the client instance, the cluster's
    brokers and routes, and one request sent to a broker or a registry with its answer checked."""

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

    async def __aenter__(self) -> Self:
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

    # -- requests -----------------------------------------------------------------------------

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
        return check_response(response, f"{what} at {address}")

    async def _invoke_registry_at(
        self, registry: str, request: RemotingCommand, what: str
    ) -> RemotingCommand:
        try:
            response = await self.instance.remoting.invoke(registry, request, self.timeout)
        except RemotingError as exc:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR, f"registry {registry} did not answer: {exc.remark}"
            ) from None
        return check_response(response, f"{what} at registry {registry}")

    async def _registry(self, request: RemotingCommand) -> RemotingCommand:
        response = await self.instance.invoke_registry(request)
        return check_response(response, f"{request_name(request.code)} at a registry")

    async def _broker(self, address: str, code: int, header: object) -> RemotingCommand:
        request = RemotingCommand.request(code, encode_header(header))
        response = await self.instance.invoke_broker(address, request, self.timeout)
        return check_response(response, f"{request_name(code)} at {address}")


def master_addresses(route: TopicRouteData) -> list[str]:
    """The master address of each broker of ``route`` that has one."""
    return [b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs]


def broker_queues(route: TopicRouteData) -> list[tuple[BrokerData, int]]:
    """Each broker of ``route`` with its queue count (the larger of read and write)."""
    counts = {q.broker_name: max(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas}
    return [(b, counts[b.broker_name]) for b in route.broker_datas if b.broker_name in counts]


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines (a Java properties text as brokers and registries write it)."""
    table: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        table[key.strip()] = value.strip()
    return table


def request_name(code: int) -> str:
    """A request code's RocketMQ name, for messages."""
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


def check_response(response: RemotingCommand, what: str) -> RemotingCommand:
    """``response`` when it is SUCCESS; otherwise MQClientError naming ``what`` failed."""
    if response.code != ResponseCode.SUCCESS:
        raise MQClientError(response.code, f"{what}: {response.remark}")
    return response
