"""`ProxyRuntime`: the parts every RPC of the proxy shares, and the call metadata helpers.

One `ClientInstance` (BoltMQ's own 4.x client core: registries, routes, broker connections)
serves every gRPC client; the proxy keeps nothing durable, so a restart loses only the live
telemetry streams, which the clients reopen.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs
import grpc

from client import ClientInstance
from proxy.config import ProxyConfig
from proxy.status import Code, ProxyError

__all__ = ["CLIENT_ID", "Context", "ProxyRuntime", "client_id", "metadata"]

#: The servicer context every RPC method takes (its type parameters are the message types).
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

#: The metadata key every official client sends its client id under.
CLIENT_ID = "x-mq-client-id"


@attrs.define
class ProxyRuntime:
    """The config, the shared client core and the proxy's own address."""

    config: ProxyConfig
    instance: ClientInstance
    #: ``host:port`` clients reach this proxy at; set once the server is bound.
    advertised: tuple[str, int] = ("127.0.0.1", 0)


def metadata(context: Context) -> dict[str, str]:
    """The call's metadata as a dict (gRPC keys are lower case); binary values are skipped."""
    return {
        key: value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)
    }


def client_id(context: Context) -> str:
    """The calling client's id; `ProxyError` CLIENT_ID_REQUIRED when it sent none."""
    value = metadata(context).get(CLIENT_ID, "").strip()
    if not value:
        raise ProxyError(
            Code.CLIENT_ID_REQUIRED, f"the call carries no client id (metadata {CLIENT_ID})"
        )
    return value
