"""Headers of broker <-> registry and admin <-> registry requests (sheet 3.8)."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class RegisterBrokerRequestHeader:
    """REGISTER_BROKER request header; ``body_crc32`` 0 means "do not check".

    ``websocket_addr`` (``ws://host:port/``) is BoltMQ's own field: the broker's websocket
    listener, which routes asked for over websocket name. Apache NameServers ignore it.
    """

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0
    websocket_addr: str | None = None


@attrs.frozen(kw_only=True)
class RegisterBrokerResponseHeader:
    """REGISTER_BROKER response header: the master's addresses, for a slave."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@attrs.frozen(kw_only=True)
class UnRegisterBrokerRequestHeader:
    """UNREGISTER_BROKER request header."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@attrs.frozen(kw_only=True)
class QueryDataVersionRequestHeader:
    """QUERY_DATA_VERSION request header (the body is the broker's DataVersion)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@attrs.frozen(kw_only=True)
class QueryDataVersionResponseHeader:
    """QUERY_DATA_VERSION response header."""

    changed: bool


@attrs.frozen(kw_only=True)
class GetRouteInfoRequestHeader:
    """GET_ROUTEINFO_BY_TOPIC request header."""

    topic: str
    accept_standard_json_only: bool | None = None


@attrs.frozen(kw_only=True)
class PutKVConfigRequestHeader:
    """PUT_KV_CONFIG request header."""

    namespace: str
    key: str
    value: str


@attrs.frozen(kw_only=True)
class GetKVConfigRequestHeader:
    """GET_KV_CONFIG request header."""

    namespace: str
    key: str


@attrs.frozen(kw_only=True)
class GetKVConfigResponseHeader:
    """GET_KV_CONFIG response header."""

    value: str | None = None


@attrs.frozen(kw_only=True)
class DeleteKVConfigRequestHeader:
    """DELETE_KV_CONFIG request header."""

    namespace: str
    key: str


@attrs.frozen(kw_only=True)
class GetKVListByNamespaceRequestHeader:
    """GET_KVLIST_BY_NAMESPACE request header."""

    namespace: str


@attrs.frozen(kw_only=True)
class WipeWritePermOfBrokerRequestHeader:
    """WIPE_WRITE_PERM_OF_BROKER request header."""

    broker_name: str


@attrs.frozen(kw_only=True)
class WipeWritePermOfBrokerResponseHeader:
    """WIPE_WRITE_PERM_OF_BROKER response header."""

    wipe_topic_count: int


@attrs.frozen(kw_only=True)
class AddWritePermOfBrokerRequestHeader:
    """ADD_WRITE_PERM_OF_BROKER request header."""

    broker_name: str


@attrs.frozen(kw_only=True)
class AddWritePermOfBrokerResponseHeader:
    """ADD_WRITE_PERM_OF_BROKER response header."""

    add_topic_count: int


@attrs.frozen(kw_only=True)
class DeleteTopicFromNamesrvRequestHeader:
    """DELETE_TOPIC_IN_NAMESRV request header; without a cluster the topic goes everywhere."""

    topic: str
    cluster_name: str | None = None


@attrs.frozen(kw_only=True)
class GetTopicsByClusterRequestHeader:
    """GET_TOPICS_BY_CLUSTER request header."""

    cluster: str
