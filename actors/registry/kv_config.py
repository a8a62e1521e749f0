"""The registry's KV configuration (namespace -> key -> value), kept in kvConfig.json.

The order-topic configuration lives here (namespace ``ORDER_TOPIC_CONFIG``, key = topic, value
like ``broker-a:8;broker-b:8``). The registry actor writes the file after every change (tmp +
fsync + rename, .bak kept); a file that does not parse (and has no usable .bak) stops the start
with an error naming it, and is left exactly as it was.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import attrs
import orjson

from supervisors.config_file import ConfigFileError, load_json_config, save_json_config

log = logging.getLogger("boltmq.registry")

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigError(Exception):
    """kvConfig.json exists but cannot be read as a KV configuration."""


@attrs.frozen
class KVConfigStatistics:
    """Sizes of the KV configuration at one moment."""

    namespaces: int
    entries: int
    path: str | None


class KVConfig:
    """The KV table with load/persist; ``path=None`` keeps it in memory only."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = None if path is None else Path(path).expanduser()
        self.config_table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file (or its .bak); a missing file means an empty table."""
        if self.path is None:
            return
        path = self.path
        try:
            table = load_json_config(path, lambda data: _parse(data, path))
        except ConfigFileError as exc:
            raise KVConfigError(str(exc)) from None
        except OSError as exc:
            raise KVConfigError(f"KV config file {self.path} cannot be read: {exc}") from None
        if table is None:
            log.info("registry: no KV config at %s yet; starting empty", self.path)
            return
        self.config_table = table
        log.info(
            "registry: loaded %d KV entries in %d namespaces from %s",
            sum(len(t) for t in self.config_table.values()),
            len(self.config_table),
            self.path,
        )

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set one value (call `save` to persist)."""
        self.config_table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        """One value, or None."""
        table = self.config_table.get(namespace)
        return None if table is None else table.get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove one value (and an emptied namespace); False if it was absent."""
        table = self.config_table.get(namespace)
        if table is None or key not in table:
            return False
        del table[key]
        if not table:
            del self.config_table[namespace]
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace's table, or None when it has no entries."""
        table = self.config_table.get(namespace)
        return dict(table) if table else None

    def to_json(self) -> bytes:
        """The kvConfig.json document (Java's KVConfigSerializeWrapper shape)."""
        return orjson.dumps({"configTable": self.config_table}, option=orjson.OPT_SORT_KEYS)

    def statistics(self) -> KVConfigStatistics:
        """Namespace and entry counts."""
        return KVConfigStatistics(
            namespaces=len(self.config_table),
            entries=sum(len(t) for t in self.config_table.values()),
            path=None if self.path is None else str(self.path),
        )

    def save(self, document: bytes | None = None) -> None:
        """Write ``document`` (default: the current table) to the file atomically.

        Safe to run in a worker thread with a document taken by `to_json` beforehand.
        """
        if self.path is not None:
            save_json_config(self.path, self.to_json() if document is None else document)


def _parse(data: bytes, path: Path) -> dict[str, dict[str, str]]:
    try:
        doc: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise KVConfigError(f"KV config file {path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise KVConfigError(f"KV config file {path} is not a JSON object")
    table = doc.get("configTable", {})
    if not isinstance(table, dict):
        raise KVConfigError(f"KV config file {path}: configTable is not an object")
    result: dict[str, dict[str, str]] = {}
    for namespace, entries in table.items():
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise KVConfigError(
                f"KV config file {path}: namespace {namespace!r} is not a string-to-string map"
            )
        if entries:
            result[namespace] = dict(entries)
    return result
