"""`ProxyServer` and `serve`: the gRPC server on asyncio, in front of the registry's brokers.

grpc.aio (grpcio's asyncio server) is the stack: well kept, the official clients' own, and
asynchronous, where the synchronous grpcio server would hold a thread for every long-polling
receive and every telemetry stream. BoltMQ's client runs on anyio, so it shares the loop.

    async with ProxyServer(ProxyConfig(namesrv_addr="127.0.0.1:9876", grpc_server_port=0)) as p:
        print(p.port)        # the bound port
        await p.wait_closed()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import grpc

from client import ClientInstance
from proxy.acl import AccountBook, ProxyAcl
from proxy.config import ConfigError, ProxyConfig
from proxy.metrics import serve_metrics
from proxy.runtime import ProxyRuntime
from proxy.service import MessagingService, handler

__all__ = ["ProxyServer", "serve"]

log = logging.getLogger("boltmq.proxy")

#: How long a graceful stop lets calls in flight finish before they are cancelled.
STOP_GRACE = 3.0
#: The largest gRPC message accepted by default (RocketMQ's proxy takes 130 MiB too).
MAX_INBOUND = 130 * 1024 * 1024


class ProxyServer:
    """The proxy's gRPC server and client core; an async context manager (asyncio).

    ``accounts`` are the ACL accounts calls are checked against; required when the config
    has aclEnable (the command line builds them from plain_acl.yml).
    """

    def __init__(self, config: ProxyConfig, accounts: AccountBook | None = None) -> None:
        if config.acl_enable and accounts is None:
            raise ConfigError("aclEnable is on but no ACL accounts were given to the proxy")
        self.config = config
        self.accounts = accounts
        self.port = 0
        #: The bound metrics port (0: metrics off).
        self.metrics_port = 0
        self._metrics: Any = None
        self._server: grpc.aio.Server | None = None
        self._instance: ClientInstance | None = None
        self.runtime: ProxyRuntime | None = None
        self.service: MessagingService | None = None
        self._closed = asyncio.Event()

    async def __aenter__(self) -> ProxyServer:
        config = self.config
        instance = ClientInstance(
            config.namesrv_addr,
            instance_name="proxy",
            timeout=config.request_timeout,
            access_key=config.access_key or None,
            secret_key=config.secret_key or None,
        )
        await instance.__aenter__()
        self._instance = instance
        try:
            self.runtime = ProxyRuntime(config=config, instance=instance)
            acl = ProxyAcl(self.accounts) if config.acl_enable and self.accounts else None
            self.service = MessagingService(self.runtime, acl)
            server = grpc.aio.server(
                options=[
                    # Room for a body over maxMessageSize, so that it is refused with
                    # MESSAGE_BODY_TOO_LARGE rather than cut off by gRPC's 4 MiB default.
                    (
                        "grpc.max_receive_message_length",
                        max(MAX_INBOUND, 2 * config.max_message_size),
                    ),
                ]
            )
            server.add_generic_rpc_handlers((handler(self.service),))
            host = config.bind_address
            bracketed = f"[{host}]" if ":" in host else host  # an IPv6 literal
            address = f"{bracketed}:{config.grpc_server_port}"
            try:
                self.port = server.add_insecure_port(address)
            except RuntimeError as exc:
                raise OSError(f"cannot listen on {address} for gRPC: {exc}") from exc
            await server.start()
            self._server = server
            self.runtime.advertised = _advertised(config, self.port)
            if config.metrics_exporter_type.upper() == "PROM":
                self._metrics, self.metrics_port = serve_metrics(
                    config.metrics_prom_exporter_host or config.bind_address,
                    config.metrics_prom_exporter_port,
                )
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop: let calls in flight finish (up to `STOP_GRACE`), then drop the brokers."""
        try:
            if self._metrics is not None:
                metrics, self._metrics = self._metrics, None
                # shutdown() waits for the serving thread's next poll: not in the loop.
                await asyncio.to_thread(metrics.shutdown)
                metrics.server_close()
            if self._server is not None:
                server, self._server = self._server, None
                await server.stop(STOP_GRACE)
        finally:
            if self._instance is not None:
                instance, self._instance = self._instance, None
                await instance.__aexit__(None, None, None)
            self._closed.set()

    async def wait_closed(self) -> None:
        """Wait until the server is closed (forever, until cancelled, in `serve`)."""
        await self._closed.wait()


async def serve(config: ProxyConfig, ready: Callable[[ProxyServer], None] | None = None) -> None:
    """Run the proxy until cancelled; ``ready`` is called with the server once it listens."""
    async with ProxyServer(config) as server:
        if ready is not None:
            ready(server)
        await server.wait_closed()


def _advertised(config: ProxyConfig, port: int) -> tuple[str, int]:
    if config.advertised_address:
        host, _, given = config.advertised_address.rpartition(":")
        return host or config.advertised_address, int(given) if given.isdigit() else port
    host = config.bind_address
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return host, port
