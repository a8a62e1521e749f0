"""What a kombu connection (a ``boltmq://`` URL and its transport options) asks of BoltMQ.

    boltmq://127.0.0.1:9876                      one registry (9876 when no port is given)
    boltmq://10.0.0.5:9876;boltmq://10.0.0.6:9876  several registries, all used at once
    boltmqs://mq.example:9876                     TLS to registries and brokers
    boltmq://AK:SK@127.0.0.1:9876                 an ACL account (access key, secret key)

kombu takes ``;`` in a URL as a list of fail-over URLs and connects to the first; here every
registry of the list is given to the client, which asks them round robin and passes over one
that does not answer. Transport options (Celery's ``broker_transport_options``):

=====================  =========  ===========================================================
option                 default    meaning
=====================  =========  ===========================================================
visibility_timeout     3600       seconds a received message stays invisible to others until
                                  acked; after it, the message is delivered again
queue_nums             8          queues of a topic this transport creates (first use)
prefetch_limit         32         messages held unacknowledged per consumer when kombu sets
                                  no prefetch count
pop_wait               1.0        seconds a pop waits at the broker for a message; also how
                                  long closing a consumer may wait for its last pop
polling_interval       0.05       kombu's pause between empty rounds
send_timeout           3.0        seconds for one send or request
max_retries            16         deliveries after the first before a message that is never
                                  acked goes to the dead-letter queue (the group's
                                  retryMaxTimes)
tls, tls_ca_file,      off        TLS (``boltmqs://`` sets tls); Celery's broker_use_ssl
tls_cert_file,                    ``ca_certs``, ``certfile`` and ``keyfile`` are read too
tls_key_file
access_key,            from URL   the ACL account (the URL's user and password)
secret_key,
security_token
=====================  =========  ===========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import attrs

from client import ConnectionOptions

__all__ = ["DEFAULT_PORT", "Settings", "settings_from_connection"]

#: The registry's port when a URL names none (RocketMQ's NameServer port).
DEFAULT_PORT = 9876


@attrs.frozen
class Settings:
    """Everything the transport needs, parsed and checked once per connection."""

    namesrv_addr: str
    options: ConnectionOptions
    visibility_timeout: float = 3600.0
    queue_nums: int = 8
    prefetch_limit: int = 32
    pop_wait: float = 1.0
    send_timeout: float = 3.0
    max_retries: int = 16

    @property
    def invisible_ms(self) -> int:
        """The visibility timeout as a pop's invisible time (the broker takes 1 ms..12 h)."""
        return max(1000, min(int(self.visibility_timeout * 1000), 12 * 3600 * 1000))


def settings_from_connection(
    hostname: str | None,
    port: int | None,
    alternates: list[Any],
    userid: str | None,
    password: str | None,
    ssl: Any,
    transport_options: Mapping[str, Any],
    *,
    tls_scheme: bool,
) -> Settings:
    """Settings from a kombu Connection's parts (see the module docstring)."""
    addresses = [_address(hostname or "localhost", port)]
    for alternate in alternates:
        if isinstance(alternate, str) and alternate:
            parsed = urlparse(alternate if "://" in alternate else f"//{alternate}")
            address = _address(parsed.hostname or "localhost", parsed.port)
            if address not in addresses:
                addresses.append(address)
    opts = dict(transport_options)
    tls_file_options = ssl if isinstance(ssl, Mapping) else {}
    tls_ca_file = opts.get("tls_ca_file") or tls_file_options.get("ca_certs")
    options = ConnectionOptions(
        tls=bool(opts.get("tls") or tls_scheme or ssl or tls_ca_file) or None,
        tls_ca_file=tls_ca_file,
        tls_cert_file=opts.get("tls_cert_file") or tls_file_options.get("certfile") or "",
        tls_key_file=opts.get("tls_key_file") or tls_file_options.get("keyfile") or "",
        access_key=opts.get("access_key") or (unquote(userid) if userid else None),
        secret_key=opts.get("secret_key") or (unquote(password) if password else None),
        security_token=opts.get("security_token"),
    )
    return Settings(
        namesrv_addr=";".join(addresses),
        options=options,
        visibility_timeout=_positive(opts, "visibility_timeout", 3600.0),
        queue_nums=int(_positive(opts, "queue_nums", 8)),
        prefetch_limit=int(_positive(opts, "prefetch_limit", 32)),
        pop_wait=_positive(opts, "pop_wait", 1.0),
        send_timeout=_positive(opts, "send_timeout", 3.0),
        max_retries=int(_positive(opts, "max_retries", 16)),
    )


def _address(host: str, port: int | None) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"{host}:{port or DEFAULT_PORT}"


def _positive(options: Mapping[str, Any], name: str, default: float) -> float:
    value = options.get(name, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"transport option {name}={value!r} is not a number") from None
    if number <= 0:
        raise ValueError(f"transport option {name}={value!r} must be above 0")
    return number
