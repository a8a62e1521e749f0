"""The proxy's Prometheus metrics, under RocketMQ 5's names with ``protocol_type="grpc"``.

* ``rocketmq_rpc_latency`` (histogram, ms): ``protocol_type``, ``request_code`` (the RPC
  name, ``SendMessage``), ``response_code`` (the v2 Code of the answer, lower case, ``ok``);
  the buckets of the brokers' remoting histogram (1, 3, 5, 7, 10, 100, 1000, 2000, 3000 ms).
  A stream (ReceiveMessage, Telemetry) counts once, when it ends.
* ``rocketmq_messages_in_total``: ``protocol_type``, ``topic``, ``message_type`` (normal,
  fifo, delay, transaction): messages the brokers stored from the proxy's sends.
* ``rocketmq_messages_out_total``: ``protocol_type``, ``topic``, ``consumer_group``: messages
  handed to consumers (the receive path calls `messages_out`).

The series live in one registry per process (`REGISTRY`); `serve_metrics` serves its text on
``/metrics`` of the metrics port, from a thread of prometheus_client's own.
"""

from __future__ import annotations

import logging
from time import perf_counter
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb

__all__ = [
    "PROTOCOL",
    "REGISTRY",
    "messages_in",
    "messages_out",
    "rpc_done",
    "serve_metrics",
]

log = logging.getLogger("boltmq.proxy.metrics")

PROTOCOL = "grpc"
#: Every series of the proxy (a registry of its own: a test process may run brokers too).
REGISTRY = CollectorRegistry(auto_describe=True)
LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)

_RPC_LATENCY = Histogram(
    "rocketmq_rpc_latency",
    "Milliseconds from a gRPC call's arrival to its answer (a stream: to its end).",
    ["protocol_type", "request_code", "response_code"],
    buckets=LATENCY_BUCKETS_MS,
    registry=REGISTRY,
)
_MESSAGES_IN = Counter(
    "rocketmq_messages_in",
    "Messages the brokers stored from sends through the proxy.",
    ["protocol_type", "topic", "message_type"],
    registry=REGISTRY,
)
_MESSAGES_OUT = Counter(
    "rocketmq_messages_out",
    "Messages the proxy handed to consumers.",
    ["protocol_type", "topic", "consumer_group"],
    registry=REGISTRY,
)
_TYPE_NAMES: dict[int, str] = {
    pb.NORMAL: "normal",
    pb.FIFO: "fifo",
    pb.DELAY: "delay",
    pb.TRANSACTION: "transaction",
}


def rpc_done(rpc: str, code: int, started: float) -> None:
    """Count one answered call of ``rpc`` begun at ``started`` (`time.perf_counter`)."""
    try:
        label = pb.Code.Name(code).lower()
    except ValueError:
        label = str(code)
    _RPC_LATENCY.labels(PROTOCOL, rpc, label).observe((perf_counter() - started) * 1000.0)


def messages_in(topic: str, message_type: int, count: int = 1) -> None:
    """``count`` messages of ``message_type`` (a v2 MessageType) stored under ``topic``."""
    kind = _TYPE_NAMES.get(message_type, "normal")
    _MESSAGES_IN.labels(PROTOCOL, topic, kind).inc(count)


def messages_out(topic: str, group: str, count: int = 1) -> None:
    """``count`` messages of ``topic`` handed to consumer group ``group``."""
    _MESSAGES_OUT.labels(PROTOCOL, topic, group).inc(count)


def serve_metrics(address: str, port: int) -> tuple[WSGIServer, int]:
    """Serve `REGISTRY` on ``http://address:port/metrics``; the server and its bound port."""
    server, _ = start_http_server(port, addr=address, registry=REGISTRY)
    bound = int(server.server_address[1])
    log.info("proxy metrics on http://%s:%d/metrics", address, bound)
    return server, bound
