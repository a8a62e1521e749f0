"""kombu's virtual transport over BoltMQ: queues are topics, consumption is pop.

- A kombu queue is a topic (created on first declare with ``queue_nums`` queues) read by a
  consumer group of its own (`boltmq.kombu.names`).
- Publishing to the default exchange sends to the queue's topic; publishing to a named
  exchange (direct, topic or fanout) sends once to the exchange's topic with the routing key
  as the message's ``KOMBU_ROUTING_KEY`` property (and its tag when it can be one). A queue
  bound to an exchange reads the exchange's topic with its own group and keeps the routing
  keys its bindings match, so every bound queue in every process gets its copy: the binding
  table lives in the broker's groups, not in one process.
- A consumed message is popped with kombu's ``visibility_timeout`` as its invisible time:
  ack acks it, reject with requeue makes it visible again at once, reject without requeue
  sends it to ``%DLQ%<group>``; a message never acked comes back after the timeout, and after
  ``max_retries`` more deliveries goes to the dead-letter queue. Celery's ``eta`` and
  ``countdown`` become the message's delivery time, kept by the broker.
- Closing a channel makes its unacked messages visible again at once (no copy is re-sent).
"""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import datetime
from queue import Empty
from typing import Any

from kombu.transport import virtual
from kombu.utils.json import dumps, loads

from boltmq.kombu.bridge import (
    INIT_MODE_MAX,
    Bridge,
    RegistryUnreachable,
    Source,
    tag_safe,
)
from boltmq.kombu.names import exchange_topic, queue_group, queue_topic
from boltmq.kombu.settings import settings_from_connection
from client import MQClientError
from protocol.codes import ResponseCode
from protocol.command import ConnectionClosedError, RemotingError, RemotingTimeoutError

__all__ = ["Channel", "QoS", "TLSTransport", "Transport"]


class QoS(virtual.QoS):  # type: ignore[misc]
    """Acks, rejects and restores reach the broker through the message's receipt handle."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        """Ack at the broker (sent in the background, batched), then forget the message."""
        self.channel.bridge.ack_soon(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """Requeue: visible again now; no requeue: to the group's dead-letter queue."""
        bridge = self.channel.bridge
        bridge.call(bridge.requeue if requeue else bridge.dead_letter, delivery_tag)
        self._quick_ack(delivery_tag)

    def restore_unacked(self) -> list[Any]:
        """Make every unacked message visible again (kombu would send a copy instead)."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        bridge = self.channel.bridge
        bridge.call(bridge.flush_acks)  # acked ones first: they must not come back
        if tags:
            bridge.call(bridge.requeue_all, tags)
        return []


class Channel(virtual.Channel):  # type: ignore[misc]
    """A kombu channel of a BoltMQ connection (see the module docstring)."""

    QoS = QoS
    supports_fanout = True
    # Fanout, topic and direct exchanges all go through the exchange's topic.
    exchange_types = dict(virtual.Channel.exchange_types)

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        assert connection.bridge is not None, "channels open once the connection is established"
        self.bridge: Bridge = connection.bridge
        #: Queues declared not durable or auto-deleted: a new binding starts at the end.
        self._transient: set[str] = set()
        #: Consumed queue -> kombu's no_ack for it (such messages are acked on arrival).
        self._no_ack: dict[str, bool] = {}

    # -- queues ---------------------------------------------------------------------------------

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        topic, group = queue_topic(queue), queue_group(queue)
        self.bridge.call(self.bridge.ensure_topic, topic)
        self.bridge.call(self.bridge.ensure_group, group)
        if kwargs.get("auto_delete") or kwargs.get("exclusive") or not kwargs.get("durable", True):
            self._transient.add(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        route = self.bridge.call(self.bridge.instance.update_route, queue_topic(queue))
        return route is not None

    def _size(self, queue: str) -> int:
        size: int = self.bridge.call(self.bridge.backlog, queue_group(queue), queue_topic(queue))
        return size

    def _purge(self, queue: str) -> int:
        purged: int = self.bridge.call(
            self.bridge.move_to_end, queue_group(queue), queue_topic(queue)
        )
        return purged

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False,
                     **kwargs: Any) -> None:  # fmt: skip
        """Delete the queue: its group and its topic; its bindings are forgotten."""
        if if_empty and self._size(queue):
            return
        self.bridge.call(self.bridge.cancel, queue)
        self.bridge.call(self.bridge.drop, queue_topic(queue), queue_group(queue))
        self.state.queue_bindings_delete(queue)
        self._transient.discard(queue)

    # -- exchanges and bindings -----------------------------------------------------------------

    def exchange_declare(self, exchange: str | None = None, type: str = "direct",
                         *args: Any, **kwargs: Any) -> None:  # fmt: skip
        """Declare the exchange here and create its topic at the broker."""
        super().exchange_declare(exchange, type, *args, **kwargs)
        if exchange and not kwargs.get("passive"):
            self.bridge.call(self.bridge.ensure_topic, exchange_topic(exchange))

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        # Called by queue_bind (supports_fanout) for every exchange type.
        if not exchange:
            return
        topic, group = exchange_topic(exchange), queue_group(queue)
        self.bridge.call(self.bridge.ensure_topic, topic)
        self.bridge.call(self.bridge.ensure_group, group)
        # A transient queue (AMQP: deleted with its consumer) gets what is published from
        # now on, never what an earlier holder of its name left behind.
        if queue in self._transient or not self.bridge.call(self.bridge.has_offsets, group, topic):
            self.bridge.call(self.bridge.move_to_end, group, topic)
        if queue in self._active_queues:
            self._start_consuming(queue, self._no_ack.get(queue, False))

    def _sources(self, queue: str) -> list[Source]:
        """The queue's topic, and one source per exchange it is bound to."""
        group = queue_group(queue)
        sources = [Source(queue_topic(queue), group)]
        keys: dict[str, set[str]] = {}
        patterns: dict[str, list[str]] = {}
        for exchange, routing_key, _arguments in self.state.queue_bindings(queue):
            if not exchange:
                continue
            kind = self.typeof(exchange).type
            if kind == "fanout":
                keys.setdefault(exchange, set())
                patterns.setdefault(exchange, []).append(".*")
            elif kind == "topic":
                pattern = self.typeof(exchange).key_to_pattern(routing_key)
                patterns.setdefault(exchange, []).append(pattern)
            else:
                keys.setdefault(exchange, set()).add(routing_key)
        for exchange in sorted(keys.keys() | patterns.keys()):
            exact = keys.get(exchange, set())
            matching = tuple(patterns.get(exchange, ()))
            expression = "*"
            if not matching and exact and all(tag_safe(k) for k in exact):
                expression = " || ".join(sorted(exact))
            sources.append(Source(
                exchange_topic(exchange), group, init_mode=INIT_MODE_MAX,
                keys=frozenset(exact), patterns=matching, expression=expression,
            ))  # fmt: skip
        return sources

    # -- publishing -----------------------------------------------------------------------------

    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str,
                      **kwargs: Any) -> None:  # fmt: skip
        """Send to the queue's topic (default exchange) or once to the exchange's topic."""
        self._inplace_augment_message(message, exchange, routing_key)
        if exchange:
            self._send(exchange_topic(exchange), message, routing_key)
        else:
            self._put(routing_key, message, **kwargs)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        self._send(queue_topic(queue), message, None)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:  # fmt: skip
        self._send(exchange_topic(exchange), message, routing_key)

    def _send(self, topic: str, message: dict[str, Any], routing_key: str | None) -> None:
        headers = message.get("headers") or {}
        task_id = headers.get("id")
        self.bridge.call(
            self.bridge.send, topic, message, routing_key=routing_key,
            deliver_time_ms=_deliver_time_ms(headers),
            keys=task_id if isinstance(task_id, str) else None,
        )  # fmt: skip

    # -- consuming ------------------------------------------------------------------------------

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str,
                      **kwargs: Any) -> Any:  # fmt: skip
        """Register kombu's callback and start the queue's pop loops."""
        result = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self._no_ack[queue] = no_ack
        self._start_consuming(queue, no_ack)
        return result

    def basic_cancel(self, consumer_tag: str) -> Any:
        """Stop the queue's pop loops; its undelivered messages become visible again."""
        queue_name = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue_name is not None and queue_name not in self._active_queues:
            with contextlib.suppress(RemotingError):
                self.bridge.call(self.bridge.cancel, queue_name)
        return result

    def _start_consuming(self, queue_name: str, no_ack: bool) -> None:
        self.bridge.call(self.bridge.consume, queue_name, self._sources(queue_name),
                         self._window, no_ack)  # fmt: skip

    def _window(self) -> int:
        # kombu's prefetch count (Celery: concurrency x prefetch multiplier), else the option.
        return int(self.qos.prefetch_count or self.bridge.settings.prefetch_limit)

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        delivery = self.bridge.call(self.bridge.get_one, queue, self._sources(queue))
        if delivery is None:
            raise Empty()
        payload: dict[str, Any] = delivery.payload
        return payload

    def _get_many(self, queues: list[str], timeout: float | None = None) -> None:
        # One inbox per connection: whichever channel drains delivers to the queue's callback.
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                delivery = self.bridge.inbox.get(timeout=min(wait, 1.0))
            except Empty:
                if self.closed or (deadline is not None and time.monotonic() >= deadline):
                    raise Empty() from None
                continue
            self.connection._deliver(delivery.payload, delivery.queue)
            return

    def close(self) -> None:
        """Cancel consumers, make unacked messages visible again, close the channel."""
        bridge_open = self.connection is not None and self.bridge.is_open
        if not bridge_open and self._qos is not None:
            self._qos.restore_at_shutdown = False  # nothing left to tell the broker
        super().close()


class Transport(virtual.Transport):  # type: ignore[misc]
    """kombu transport ``boltmq://host:port[;host:port]``: see the package docstring."""

    Channel = Channel
    default_port = 9876
    driver_type = "boltmq"
    driver_name = "boltmq"
    polling_interval = 0.05
    tls = False
    implements = virtual.Transport.implements.extend(
        asynchronous=False,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )
    connection_errors = (
        *virtual.Transport.connection_errors,
        RegistryUnreachable,
        ConnectionClosedError,
        RemotingTimeoutError,
    )
    channel_errors = (*virtual.Transport.channel_errors, MQClientError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.bridge: Bridge | None = None

    def establish_connection(self) -> Any:
        """Start the client (its loop thread) and check that a registry answers."""
        client = self.client
        settings = settings_from_connection(
            client.hostname, client.port, list(client.alt or []), client.userid,
            client.password, client.ssl, client.transport_options or {}, tls_scheme=self.tls,
        )  # fmt: skip
        bridge = Bridge(settings, encode=dumps, decode=loads)
        bridge.start()
        self.bridge = bridge
        return super().establish_connection()

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver the next message of any consumed queue, waiting up to ``timeout`` s.

        One wait on the connection's inbox, where kombu's own loop would wait the whole
        timeout on each channel in turn (a worker's task and control channels: twice).
        """
        bridge = self.bridge
        if bridge is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the BoltMQ connection is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            try:
                delivery = bridge.inbox.get(timeout=max(0.0, left))
                break
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError() from None
                if _celery_stopping():
                    # Celery's loop drains once more after a stop was asked; a whole timeout
                    # twice over would only delay the warm shutdown.
                    raise TimeoutError() from None
        self._deliver(delivery.payload, delivery.queue)

    def close_connection(self, connection: Any) -> None:
        """Close the channels (unacked messages visible again), then the client."""
        try:
            super().close_connection(connection)
        finally:
            bridge, self.bridge = self.bridge, None
            if bridge is not None:
                bridge.close()

    def driver_version(self) -> str:
        """BoltMQ's version."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("boltmq")
        except PackageNotFoundError:
            return "unknown"


class TLSTransport(Transport):
    """``boltmqs://``: the same transport with TLS to registries and brokers."""

    tls = True


def _celery_stopping() -> bool:
    state = sys.modules.get("celery.worker.state")
    return state is not None and (
        getattr(state, "should_stop", None) is not None
        or getattr(state, "should_terminate", None) is not None
    )


def _deliver_time_ms(headers: dict[str, Any]) -> int | None:
    # Celery's task protocol 2 carries countdown and eta as the ``eta`` header (ISO 8601).
    eta = headers.get("eta")
    if not isinstance(eta, str) or not eta:
        return None
    try:
        when = datetime.fromisoformat(eta).timestamp()
    except ValueError:
        return None
    if when <= time.time():
        return None
    return int(when * 1000)
