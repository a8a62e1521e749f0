"""`run_proxy`: the gRPC proxy inside a trio program (`boltmq cluster`, `embedded`).

The proxy is an asyncio program (grpc.aio); a trio program hosts it on an asyncio loop in a
thread of its own (an anyio blocking portal) for as long as the hosting task runs. Cancelling
that task stops the proxy gracefully and waits for its thread; the proxy failing raises in the
hosting task, so a supervisor above restarts it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future

import anyio
import attrs
import trio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from proxy import ProxyConfig
from supervisors.supervisor import ChildSpec

__all__ = ["ProxyHandle", "proxy_child", "run_proxy"]

log = logging.getLogger("boltmq.proxy")


class ProxyHandle:
    """What the host knows of its proxy: the bound gRPC port once it serves."""

    def __init__(self, config: ProxyConfig, namesrv_addr: Callable[[], str] | None = None) -> None:
        self.config = config
        #: Asked at start when the registries' address is known only then (an ephemeral port).
        self.namesrv_addr = namesrv_addr
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``host:port`` the official 5.x clients take as their endpoints."""
        host = self.config.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"{host}:{self.port}"


async def _serve(
    config: ProxyConfig,
    *,
    task_status: anyio.abc.TaskStatus[tuple[int, anyio.Event]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    # Runs on the portal's asyncio loop. Stopped by setting the event, not by cancellation,
    # so the server's graceful stop is not itself cancelled.
    # Imported here: grpc and the generated modules load only where a proxy runs.
    from proxy.server import ProxyServer

    stop = anyio.Event()
    async with ProxyServer(config) as server:
        task_status.started((server.port, stop))
        await stop.wait()


async def run_proxy(
    handle: ProxyHandle, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``handle.config`` until cancelled; started once the gRPC port listens."""
    if handle.namesrv_addr is not None:
        handle.config = attrs.evolve(handle.config, namesrv_addr=handle.namesrv_addr())
    portal_cm = start_blocking_portal("asyncio", name="boltmq-proxy")
    portal: BlockingPortal = await trio.to_thread.run_sync(portal_cm.__enter__)
    future: Future[None] | None = None
    stop: anyio.Event | None = None
    try:
        running, (handle.port, stop) = await trio.to_thread.run_sync(
            portal.start_task, _serve, handle.config
        )
        future = running
        log.info(
            "proxy ready: gRPC port %d; registries: %s", handle.port, handle.config.namesrv_addr
        )
        task_status.started()
        # Wait in a thread the host may abandon: cancelling the host stops the proxy below.
        await trio.to_thread.run_sync(running.result, abandon_on_cancel=True)
        raise RuntimeError("the gRPC proxy stopped by itself")
    finally:
        with trio.CancelScope(shield=True):
            if stop is not None and future is not None and not future.done():
                await trio.to_thread.run_sync(portal.call, stop.set)
                await trio.to_thread.run_sync(future.result)
            await trio.to_thread.run_sync(portal_cm.__exit__, None, None, None)


def proxy_child(handle: ProxyHandle) -> ChildSpec:
    """A supervisor child running the proxy (its graceful stop is the task's cancellation)."""
    return ChildSpec.function("proxy", lambda **kw: run_proxy(handle, **kw), shutdown_timeout=10.0)
