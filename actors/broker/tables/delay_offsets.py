"""Delay-level and timer-queue progress: ``delayOffset.json`` and ``timerOffset.json``.

Plain persisted state (`PersistedTable`): the schedule service (`actors.broker.services.schedule`)
loads it, advances it and writes it; a slave's config sync (`actors.broker.ha.sync`) replaces it
with its master's; GET_ALL_DELAY_OFFSET answers with it.
"""

from __future__ import annotations

from pathlib import Path

from actors.broker.tables.table_actor import PersistedTable
from protocol.bodies import DelayOffsetSerializeWrapper


class DelayOffsetTable(PersistedTable):
    """Queue progress (key -> next queue offset) in fastjson form, e.g. ``delayOffset.json``."""

    def __init__(self, path: Path | None) -> None:
        super().__init__(path)
        self.offset_table: dict[int, int] = {}

    def to_json(self) -> bytes:
        """``{"offsetTable":{1:0,2:15}}``."""
        return DelayOffsetSerializeWrapper(offset_table=dict(self.offset_table)).to_json()

    def from_json(self, data: bytes) -> None:
        """Load the file's table."""
        self.offset_table = dict(DelayOffsetSerializeWrapper.from_json(data).offset_table)
