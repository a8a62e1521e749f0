"""Remoting request latency as RocketMQ 5's rocketmq_rpc_latency histogram.

`RpcLatency.on_rpc` counts one answered request into the histogram buckets of its request
and response code: a dict look-up, a bisect and two adds, no lock (one trio thread) and no
object per request. `timed` wraps a dispatcher handler to time it; a handler that answers
later (from a store callback) calls `on_rpc` itself with the time it started. Broker and
registry share it, which is why it sits in the remoting layer, as RocketMQ's
RemotingMetricsManager does. `rpc_latency_family` turns the counts into the Prometheus family,
labelled as RocketMQ labels it: ``protocol_type="remoting"``, ``request_code`` and
``response_code`` as the lower-case names of the codes (the number when unknown).
"""

from __future__ import annotations

import bisect
import functools
import inspect
from collections.abc import Iterable, Mapping
from time import perf_counter
from typing import cast

from prometheus_client.metrics_core import HistogramMetricFamily

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import (
    AsyncHandler,
    Connection,
    Dispatcher,
    Handler,
    Later,
    SyncHandler,
)

__all__ = [
    "RPC_LATENCY_BUCKETS_MS",
    "RpcLatency",
    "request_code_label",
    "response_code_label",
    "rpc_latency_family",
    "time_handlers",
]

#: Upper bounds of the latency buckets in ms, as RocketMQ 5's RemotingMetricsManager.
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
# A counter is [sum of ms, one count per bucket, the overflow count].
_WIDTH = 1 + len(RPC_LATENCY_BUCKETS_MS) + 1


class RpcLatency:
    """Latency histograms of the requests one server answered, by request and response code."""

    def __init__(self) -> None:
        #: request code -> response code -> [sum of ms, *bucket counts, overflow count].
        self.counts: dict[int, dict[int, list[float]]] = {}

    def on_rpc(self, request_code: int, response_code: int, started: float) -> None:
        """A request whose handler started at ``started`` (`perf_counter`) was answered."""
        milliseconds = (perf_counter() - started) * 1000.0
        codes = self.counts.get(request_code)
        if codes is None:
            codes = self.counts[request_code] = {}
        counter = codes.get(response_code)
        if counter is None:
            counter = codes[response_code] = [0.0] * _WIDTH
        counter[0] += milliseconds
        counter[1 + bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, milliseconds)] += 1

    async def _answer_counted(
        self,
        handler: AsyncHandler,
        started: float,
        connection: Connection,
        request: RemotingCommand,
    ) -> RemotingCommand | None:
        """Await ``handler``'s answer and count it from ``started`` (an async handler's call,
        or the dispatch of a plain one that answered `Later`)."""
        try:
            response = await handler(connection, request)
        except RemotingError as refused:  # answered with its code by the connection
            self.on_rpc(request.code, refused.code, started)
            raise
        if response is not None:
            self.on_rpc(request.code, response.code, started)
        return response

    def timed(self, handler: Handler) -> Handler:
        """``handler`` wrapped so each answer it returns (or `RemotingError` it raises) is
        counted. A handler that returns None answers later or not at all (a oneway request);
        it is not counted here."""
        on_rpc = self.on_rpc
        if inspect.iscoroutinefunction(handler):
            async_handler = cast(AsyncHandler, handler)

            async def timed_async(
                connection: Connection, request: RemotingCommand
            ) -> RemotingCommand | None:
                return await self._answer_counted(
                    async_handler, perf_counter(), connection, request
                )

            return timed_async
        sync_handler = cast(SyncHandler, handler)

        def timed_sync(
            connection: Connection, request: RemotingCommand
        ) -> RemotingCommand | Later | None:
            started = perf_counter()
            try:
                response = sync_handler(connection, request)
            except RemotingError as refused:
                on_rpc(request.code, refused.code, started)
                raise
            if type(response) is Later:
                return Later(functools.partial(self._answer_counted, response.handler, started))
            if response is not None:
                on_rpc(request.code, response.code, started)  # type: ignore[union-attr]
            return response

        return timed_sync


def request_code_label(code: int) -> str:
    """``send_message_v2`` for 310: RocketMQ's label is the code's lower-case name."""
    try:
        return RequestCode(code).name.lower()
    except ValueError:
        return str(code)


def response_code_label(code: int) -> str:
    """``success`` for 0, ``pull_not_found`` for 19, the number when unknown."""
    try:
        return ResponseCode(code).name.lower()
    except ValueError:
        return str(code)


def rpc_latency_family(
    latency: RpcLatency, labels: Mapping[str, str]
) -> HistogramMetricFamily:
    """rocketmq_rpc_latency (ms) with ``labels`` (cluster, node_type, node_id) on every series."""
    names = [*labels, "protocol_type", "request_code", "response_code"]
    family = HistogramMetricFamily(
        "rocketmq_rpc_latency",
        "Time from a request's dispatch to its answer, in milliseconds",
        labels=names,
        unit="",
    )
    fixed = list(labels.values())
    for request_code, codes in sorted(latency.counts.items()):
        request = request_code_label(request_code)
        for response_code, counter in sorted(codes.items()):
            buckets: list[tuple[str, float]] = []
            running = 0.0
            for bound, count in zip(RPC_LATENCY_BUCKETS_MS, counter[1:], strict=False):
                running += count
                buckets.append((repr(bound), running))
            buckets.append(("+Inf", running + counter[-1]))
            family.add_metric(
                [*fixed, "remoting", request, response_code_label(response_code)],
                buckets,
                counter[0],
            )
    return family


def time_handlers(dispatcher: Dispatcher, latency: RpcLatency, *, skip: Iterable[int] = ()) -> None:
    """Wrap every handler of ``dispatcher`` with `RpcLatency.timed`, but the codes in ``skip``
    (handlers that answer from a callback and count their answers themselves)."""
    skipped = {int(code) for code in skip}
    for code in dispatcher.codes():
        entry = dispatcher.lookup(code)
        if entry is not None and code not in skipped:
            dispatcher.register(code, latency.timed(entry[1]))
