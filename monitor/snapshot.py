"""What the monitor shows: plain, frozen rows of one refresh, and their JSON form.

A value of None means *not known yet* (a rate needs two samples, a lag needs the topic's
offsets), which the views print as ``-`` and the JSON as ``null``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import orjson

from protocol import names


def is_system_topic(topic: str, broker_and_cluster_names: set[str] | frozenset[str]) -> bool:
    """A topic of RocketMQ's own (a broker also keeps topics named after itself and its cluster)."""
    return names.is_system_topic(topic) or topic in broker_and_cluster_names


def is_system_group(group: str) -> bool:
    """A producer or consumer group of RocketMQ's own or its tools'."""
    return names.is_system_group(group)


@attrs.frozen(kw_only=True)
class Header:
    """The line above every view."""

    registries: dict[str, str | None]
    clusters: list[str]
    brokers: int
    brokers_down: int
    in_tps: float
    out_tps: float
    alerts: int
    requests: int
    refresh_seconds: float
    wall_ms: int


@attrs.frozen(kw_only=True)
class BrokerRow:
    """One broker (master or slave); ``error`` set when it does not answer."""

    broker_name: str
    broker_id: int
    address: str
    role: str
    cluster: str = ""
    error: str | None = None
    version: str | None = None
    #: The broker's codec path: "compiled", or "pure (why)" (GET_BROKER_RUNTIME_INFO's codecs).
    codecs: str | None = None
    uptime_s: float | None = None
    in_tps: float | None = None
    out_tps: float | None = None
    sparkline: list[float] = attrs.Factory(list)
    store_bytes: int | None = None
    disk_ratio: float | None = None
    retention_hours: float | None = None
    #: From putMessageDistributeTime over the last refresh: the cell, the p99 bucket and the
    #: share of puts that took 10 ms or more.
    put_latency: str | None = None
    put_p99: str | None = None
    put_over_10ms: float | None = None
    repl_lag_bytes: int | None = None
    repl_lag_seconds: float | None = None


@attrs.frozen(kw_only=True)
class TopicRow:
    """One topic over every broker that has it."""

    topic: str
    system: bool = False
    queues: int = 0
    in_tps: float | None = None
    out_tps: float | None = None
    max_offset: int = 0
    messages: int = 0
    brokers: list[str] = attrs.Factory(list)
    #: False while some broker's offsets of the topic have not been fetched yet.
    known: bool = True


@attrs.frozen(kw_only=True)
class GroupRow:
    """One consumer group on one topic; ``status`` is ok, growing, slow or stalled."""

    group: str
    topic: str
    members: int | None
    consume_tps: float | None
    lag: int | None
    lag_latency_s: float | None
    catch_up_s: float | None
    retry_depth: int | None
    dlq_depth: int | None
    status: str
    reason: str
    #: A pop group's (RocketMQ 5) messages popped and not yet acked nor come back, and
    #: acked since its brokers started; None for a group that does not pop.
    in_flight: int | None = None
    acked: int | None = None


@attrs.frozen(kw_only=True)
class ClientRow:
    """One client connection; a producer row with ``note`` says producers are unknown there."""

    role: str  # "producer" or "consumer"
    group: str
    client_id: str
    address: str
    language: str
    version: int
    note: str | None = None


@attrs.frozen
class QueueRow:
    """One queue in a drill-down (a group's progress or a topic's offsets)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int | None
    consumer_offset: int | None
    diff: int | None
    client: str | None
    min_offset: int | None = None
    last_update_ms: int | None = None


@attrs.frozen(kw_only=True)
class ControllerGroupRow:
    """One broker group in controller mode: its master, epochs and SyncStateSet as the
    controller says, and the controller leader; ``error`` when no controller answered."""

    broker_name: str
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set: list[int] = attrs.Factory(list)
    sync_state_set_epoch: int | None = None
    #: Members that are registered with the controller but not in sync.
    not_in_sync: list[int] = attrs.Factory(list)
    controller_leader: str | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class Alert:
    """An active alert and the wall-clock time (ms) its condition started."""

    kind: str
    subject: str
    message: str
    since_ms: int


@attrs.frozen
class Snapshot:
    """One refresh, every view's rows."""

    header: Header
    brokers: list[BrokerRow]
    topics: list[TopicRow]
    groups: list[GroupRow]
    clients: list[ClientRow]
    alerts: list[Alert]
    #: Controller mode's broker groups (empty when no controller is known).
    controller_groups: list[ControllerGroupRow] = attrs.Factory(list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: an infinite time to catch up is written as null."""
        plain: dict[str, Any] = _finite(attrs.asdict(self))
        return plain

    def to_json(self) -> bytes:
        """The snapshot as indented JSON (what ``--json`` prints)."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
