"""One output path for every verb: a rich table for people, ``--json`` for scripts.

A `Table` is defined once by its `Column`s: each column's key is the camelCase JSON key, its
title the table heading, its format how a value reads in the table (JSON keeps the raw value).
A `Result` is the JSON document a verb answers plus the tables and notes that show it.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import attrs
import orjson
from rich import box
from rich.console import Console
from rich.table import Table as RichTable


def human_time(millis: int) -> str:
    """A store timestamp (ms) as local time, mqadmin's layout; 0 reads as ``-``."""
    if millis <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{millis % 1000:03d}"


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if value is None:
        return "-"
    return str(value)


@attrs.frozen
class Column:
    """A column: JSON key (camelCase), table title, and the table rendering of a value."""

    key: str
    title: str
    format: Callable[[Any], str] = _plain
    justify: str = "left"


def number(key: str, title: str) -> Column:
    """A right-aligned numeric column."""
    return Column(key, title, _plain, "right")


def timestamp(key: str, title: str) -> Column:
    """A store-time column: milliseconds in JSON, local time in the table."""
    return Column(key, title, lambda v: human_time(int(v or 0)))


@attrs.frozen
class Table:
    """Rows (dicts keyed by the columns' keys) under one set of columns."""

    columns: tuple[Column, ...]
    rows: Sequence[Mapping[str, Any]]
    title: str | None = None

    def to_json(self) -> list[dict[str, Any]]:
        """The rows as JSON objects with exactly the columns' keys, in column order."""
        return [{c.key: row.get(c.key) for c in self.columns} for row in self.rows]


@attrs.frozen
class Result:
    """What a verb answers: the ``--json`` document and the tables and notes of table mode."""

    document: Any
    tables: tuple[Table, ...] = ()
    notes: tuple[str, ...] = ()
    #: The verb already printed its output as it went (a verb repeating with -i): only the
    #: notes remain, and nothing at all with --json (the lines printed are the documents).
    streamed: bool = False

    @classmethod
    def of_table(cls, table: Table, notes: Sequence[str] = ()) -> Result:
        """A result whose JSON is the table's rows."""
        return cls(table.to_json(), (table,), tuple(notes))

    @classmethod
    def of_mapping(
        cls, mapping: Mapping[str, Any], key_title: str = "Key", value_title: str = "Value"
    ) -> Result:
        """A key/value result: a JSON object, a two-column table sorted by key."""
        columns = (Column("key", key_title), Column("value", value_title))
        rows = [{"key": k, "value": mapping[k]} for k in sorted(mapping)]
        return cls(dict(mapping), (Table(columns, rows),))

    @classmethod
    def done(cls, message: str, document: Mapping[str, Any]) -> Result:
        """A change that succeeded: one line for people, the details for scripts."""
        return cls(dict(document), (), (message,))


def render(result: Result, as_json: bool, out: TextIO | None = None) -> None:
    """Write ``result`` to ``out`` (stdout): JSON with ``as_json``, else tables and notes."""
    out = out if out is not None else sys.stdout
    if result.streamed and as_json:
        return
    if as_json:
        data = orjson.dumps(result.document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        out.write(data.decode() + "\n")
        out.flush()
        return
    # A pipe gets whole lines: rich would otherwise wrap at 80 columns.
    console = Console(file=out, width=None if out.isatty() else 1000, highlight=False)
    for table in result.tables:
        rich_table = RichTable(
            title=table.title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False,
            pad_edge=False,
        )  # fmt: skip
        for column in table.columns:
            rich_table.add_column(column.title, justify=column.justify, no_wrap=True)  # type: ignore[arg-type]
        for row in table.rows:
            rich_table.add_row(*(c.format(row.get(c.key)) for c in table.columns))
        console.print(rich_table)
    for note in result.notes:
        console.print(note, markup=False)
