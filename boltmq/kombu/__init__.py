"""Celery and kombu on BoltMQ: the ``boltmq://`` kombu transport (extra ``boltmq[celery]``).

    import boltmq.kombu   # registers the boltmq:// and boltmqs:// schemes with kombu
    from celery import Celery

    app = Celery("tasks", broker="boltmq://127.0.0.1:9876")

kombu 5.7 finds a transport by its URL scheme in ``kombu.transport.TRANSPORT_ALIASES`` and
has no entry-point group for transports, so importing this package adds the two schemes. A
program that cannot import it first names the class instead, which needs no import:
``Celery(broker="boltmq://127.0.0.1:9876", broker_transport="boltmq.kombu:Transport")``.

How kombu's queues, exchanges, acks and timeouts map to topics, groups and pops, and what is
not supported, is in docs/celery.md; the name rule in `boltmq.kombu.names`, the URL and the
transport options in `boltmq.kombu.settings`.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from boltmq.kombu.bridge import RegistryUnreachable
from boltmq.kombu.names import NameTooLong, exchange_topic, queue_group, queue_topic
from boltmq.kombu.transport import Channel, TLSTransport, Transport

__all__ = [
    "Channel",
    "NameTooLong",
    "RegistryUnreachable",
    "TLSTransport",
    "Transport",
    "exchange_topic",
    "queue_group",
    "queue_topic",
    "register",
]


def register() -> None:
    """Add ``boltmq`` and ``boltmqs`` to kombu's transport aliases (done on import)."""
    TRANSPORT_ALIASES.setdefault("boltmq", "boltmq.kombu:Transport")
    TRANSPORT_ALIASES.setdefault("boltmqs", "boltmq.kombu:TLSTransport")


register()
