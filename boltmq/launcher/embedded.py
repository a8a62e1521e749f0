"""`embedded`: a registry and a broker in this process, and the supervisor child that
`boltmq broker` runs its broker as.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig
from actors.registry import Registry, RegistryConfig
from boltmq.launcher.proxy import ProxyHandle, run_proxy
from proxy import ProxyConfig
from supervisors.supervisor import ChildSpec


@attrs.define
class EmbeddedCluster:
    """A registry and a broker running in this process (see `embedded`)."""

    registry: Registry
    broker: Broker
    home: Path
    #: The gRPC proxy for RocketMQ 5 clients (None with ``grpc=False``).
    proxy: ProxyHandle | None = None

    @property
    def registry_address(self) -> str:
        """``host:port`` of the registry: give it to clients as the name server."""
        return self.registry.address

    @property
    def broker_address(self) -> str:
        """``host:port`` of the broker."""
        return self.broker.address

    @property
    def grpc_endpoint(self) -> str:
        """``host:port`` of the gRPC proxy: give it to the official 5.x clients as endpoints."""
        if self.proxy is None:
            raise RuntimeError("this cluster serves no gRPC: embedded(grpc=False)")
        return self.proxy.endpoint


@asynccontextmanager
async def embedded(
    home: str | Path | None = None,
    *,
    store: str = "file",
    grpc: bool = True,
    **broker_settings: object,
) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker on ephemeral loopback ports for the duration of the block.

    Data goes under ``home`` (kept) or a temporary directory (removed at the end).
    ``store="memory"`` runs the broker on the in-memory store (storeType=memory): no file of
    the broker's at all, nothing kept after the block, no replication.
    ``broker_settings`` are `BrokerConfig` fields (``flush_disk_type=...``, ``broker_name=...``);
    the ``tls_server_*`` ones apply to the registry's listener too. Unless ``grpc=False``, a
    gRPC proxy on an ephemeral loopback port serves RocketMQ 5 clients (``grpc_endpoint``).
    """
    temporary = home is None
    root = Path(tempfile.mkdtemp(prefix="boltmq-")) if home is None else Path(home).expanduser()
    try:
        registry = Registry(
            RegistryConfig(
                listen_port=0,
                bind_address="127.0.0.1",
                kv_config_path=str(root / "namesrv" / "kvConfig.json"),
                **{k: v for k, v in broker_settings.items() if k.startswith("tls_server_")},  # type: ignore[arg-type]
            )
        )
        await registry.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            settings: dict[str, object] = {
                "listen_port": 0,
                "bind_address": "127.0.0.1",
                "fast_port_enable": False,
                "store_path_root_dir": str(root / "store"),
                "namesrv_addr": registry.address,
                # In a test process an idle broker should not fault 512 MiB of page cache in.
                "commit_log_idle_prefault_mb": 0,
                "store_type": store,
            }
            settings.update(broker_settings)
            broker = Broker(BrokerConfig(**settings))  # type: ignore[arg-type]
            await nursery.start(broker.run)
            handle = None
            async with trio.open_nursery() as proxy_nursery:
                if grpc:
                    handle = ProxyHandle(
                        ProxyConfig(
                            namesrv_addr=registry.address,
                            grpc_server_port=0,
                            bind_address="127.0.0.1",
                        )
                    )
                    await proxy_nursery.start(run_proxy, handle)
                try:
                    yield EmbeddedCluster(registry, broker, root, handle)
                finally:
                    # The proxy first: it is a client of the broker.
                    proxy_nursery.cancel_scope.cancel()
            assert broker.supervisor is not None
            with trio.CancelScope(shield=True):
                await broker.supervisor.aclose()
            nursery.cancel_scope.cancel()
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def broker_child(broker: Broker) -> ChildSpec:
    """A supervisor child that runs ``broker`` and, on stop, shuts it down in order."""

    async def stop() -> None:
        if broker.supervisor is not None:
            await broker.supervisor.aclose()

    return ChildSpec.function("broker", broker.run, aclose=stop, shutdown_timeout=15.0)
