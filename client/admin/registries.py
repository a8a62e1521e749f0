"""Calls to every registry: their settings, the KV config, a broker's write permission."""

from __future__ import annotations

from client.admin.core import AdminCore, check_response, parse_properties
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    AddWritePermOfBrokerRequestHeader,
    DeleteKVConfigRequestHeader,
    GetKVConfigRequestHeader,
    PutKVConfigRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    encode_header,
)


class RegistryCalls(AdminCore):
    """Registry settings, KV config entries and brokers' write permission, on every registry."""

    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """Each registry's settings (GET_NAMESRV_CONFIG), by registry address."""
        configs: dict[str, dict[str, str]] = {}
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG)
            response = await self._invoke_registry_at(registry, request, "registry config")
            configs[registry] = parse_properties(
                bytes(response.body or b"").decode("utf-8", "replace")
            )
        return configs

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """A registry KV config value (GET_KV_CONFIG); None when it is not set."""
        header = GetKVConfigRequestHeader(namespace=namespace, key=key)
        request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, encode_header(header))
        response = await self.instance.invoke_registry(request)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        check_response(response, f"get kv config {namespace}/{key}")
        return (response.ext_fields or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """Set a KV config entry in every registry (PUT_KV_CONFIG)."""
        header = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, encode_header(header))
            await self._invoke_registry_at(registry, request, f"put kv config {namespace}/{key}")

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """Remove a KV config entry from every registry (DELETE_KV_CONFIG)."""
        header = DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        for registry in self.instance.registries:
            request = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, encode_header(header))
            await self._invoke_registry_at(registry, request, f"delete kv config {namespace}/{key}")

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Stop writes to ``broker_name`` in every registry; topics changed, by registry."""
        header = WipeWritePermOfBrokerRequestHeader(broker_name=broker_name)
        return await self._write_perm(
            RequestCode.WIPE_WRITE_PERM_OF_BROKER, encode_header(header), "wipeTopicCount"
        )

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Allow writes to ``broker_name`` again in every registry; topics changed, by registry."""
        header = AddWritePermOfBrokerRequestHeader(broker_name=broker_name)
        return await self._write_perm(
            RequestCode.ADD_WRITE_PERM_OF_BROKER, encode_header(header), "addTopicCount"
        )

    async def _write_perm(self, code: int, ext: dict[str, str], count_key: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for registry in self.instance.registries:
            request = RemotingCommand.request(code, dict(ext))
            response = await self._invoke_registry_at(registry, request, "write perm")
            counts[registry] = int((response.ext_fields or {}).get(count_key, "0"))
        return counts
