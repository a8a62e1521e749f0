"""The live screen's state and key handling, with no terminal: keys in, a renderable out.

Keys: ``?`` help, ``1``-``4`` or ``:brokers`` ``:topics`` ``:groups`` ``:clients`` switch
views, ``/`` filter, ``s`` sort by the next column, up/down (or ``k``/``j``) select,
``Enter`` drill into the selected group or topic, ``Esc`` back (or clear the filter), ``p``
pause, ``q`` quit.
"""

from __future__ import annotations

from typing import Any

import attrs
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from monitor import views
from monitor.model import Model
from monitor.snapshot import GroupRow, Snapshot, TopicRow

ENTER, ESC, UP, DOWN, BACKSPACE = "enter", "esc", "up", "down", "backspace"

HELP = """\
keys
  1 2 3 4          brokers, topics, groups, clients view (or :brokers :topics :groups :clients)
  /                filter the rows (Enter keeps it, Esc clears it)
  s                sort by the next column (numbers high first)
  up/down, k/j     select a row
  Enter            drill into the selected group (its queues) or topic (its queues' offsets)
  Esc              back out of a drill-down, or clear the filter
  p                pause / resume refreshing
  ?                this help (any key closes it)
  q                quit (the monitor changes nothing in the cluster)
"""


@attrs.define
class Drill:
    """What a drill-down shows: a group's queues (on one topic) or a topic's queues."""

    kind: str  # "group" or "topic"
    name: str
    topic: str | None = None
    #: The view's filter, put back on the way out.
    parent_filter: str = ""


@attrs.define
class Screen:
    """View, filter, sort, selection, drill-down and pause; ``key()`` changes them."""

    model: Model
    view: str = "brokers"
    filter_text: str = ""
    sort: dict[str, int | None] = attrs.Factory(dict)
    selected: int = 0
    drill: Drill | None = None
    paused: bool = False
    help: bool = False
    prompt: str | None = None  # "/" or ":" while typing
    typed: str = ""
    status: str = ""
    quit: bool = False

    def key(self, key: str) -> None:
        """Apply one key press (a character, or ENTER, ESC, UP, DOWN, BACKSPACE)."""
        self.status = ""
        if self.help:
            self.help = False
            return
        if self.prompt is not None:
            self._prompt_key(key)
            return
        if key == "q":
            self.quit = True
        elif key == "?":
            self.help = True
        elif key in ("1", "2", "3", "4"):
            self._switch(views.VIEWS[int(key) - 1])
        elif key in ("/", ":"):
            self.prompt, self.typed = key, ""
        elif key == "s":
            current = self.sort.get(self._table_key())
            self.sort[self._table_key()] = 0 if current is None else current + 1
        elif key in (DOWN, "j"):
            self.selected += 1
        elif key in (UP, "k"):
            self.selected = max(self.selected - 1, 0)
        elif key == ENTER:
            self._drill_in()
        elif key == ESC:
            if self.drill is not None:
                self.filter_text = self.drill.parent_filter
                self.drill, self.selected = None, 0
            else:
                self.filter_text = ""
        elif key == "p":
            self.paused = not self.paused

    def wanted(self) -> set[str]:
        """Topics or groups the collector should fetch first (the drill-down's subject)."""
        if self.drill is None:
            return set()
        return {self.drill.name} | ({self.drill.topic} if self.drill.topic else set())

    def render(self, snapshot: Snapshot | None, height: int) -> RenderableType:
        """The whole screen for a terminal ``height`` lines high."""
        if snapshot is None:
            return Text("connecting to the registry…  (q quits)")
        parts: list[RenderableType] = [
            views.header(snapshot.header, paused=self.paused, status=self.status)
        ]
        if self.help:
            parts.append(Panel(HELP, title="help", title_align="left"))
            return Group(*parts)
        title, rows, columns, sort = self._current(snapshot)
        alerts = views.alerts_panel(snapshot.alerts)
        alert_lines = 1 if not snapshot.alerts else len(snapshot.alerts) + 2
        # Controller mode: its groups under the brokers view, a few lines of their own.
        controller = self.drill is None and self.view == "brokers" and snapshot.controller_groups
        controller_lines = len(snapshot.controller_groups) + 4 if controller else 0
        limit = max(height - 9 - alert_lines - controller_lines, 3)
        self.selected = min(self.selected, max(len(rows) - 1, 0))
        start = max(0, self.selected - limit + 1)
        parts.append(
            views.table(
                title,
                rows[start:],
                columns,
                give_way=views.GIVE_WAY[self._table_key()],
                sort=sort,
                selected=self.selected - start,
                limit=limit,
            )
        )
        if controller:
            parts.append(views.controller_table(snapshot.controller_groups))
        parts.append(alerts)
        parts.append(Text(self._footer(), style="dim"))
        return Group(*parts)

    # -- internals ----------------------------------------------------------------------------

    def _current(self, snapshot: Snapshot) -> tuple[str, list[Any], list[Any], int | None]:
        sort = self.sort.get(self._table_key())
        if self.drill is not None and self.drill.kind == "group":
            columns = views.GROUP_QUEUE_COLUMNS
            rows: list[Any] = self.model.group_queues(self.drill.name, self.drill.topic)
            title = f"group {self.drill.name} on {self.drill.topic}: queues (Esc back)"
        elif self.drill is not None:
            columns = views.TOPIC_QUEUE_COLUMNS
            rows = self.model.topic_queues(self.drill.name)
            title = f"topic {self.drill.name}: queues (Esc back)"
        else:
            columns = views.COLUMNS[self.view]
            rows = views.rows_of(snapshot, self.view)
            title = self.view
        if self.filter_text:
            title += f"  filter: {self.filter_text}"
        return title, views.arrange(rows, columns, text=self.filter_text, sort=sort), columns, sort

    def _table_key(self) -> str:
        return f"{self.drill.kind} queues" if self.drill else self.view

    def _switch(self, view: str) -> None:
        self.view, self.drill, self.selected, self.filter_text = view, None, 0, ""

    def _prompt_key(self, key: str) -> None:
        if key == ESC:
            if self.prompt == "/":
                self.filter_text = ""
            self.prompt = None
        elif key == ENTER:
            prompt, typed = self.prompt, self.typed.strip()
            self.prompt = None
            if prompt == ":":
                if typed in views.VIEWS:
                    self._switch(typed)
                elif typed in ("q", "quit"):
                    self.quit = True
                else:
                    self.status = f"no view {typed!r}: type one of {', '.join(views.VIEWS)}"
        elif key == BACKSPACE:
            self.typed = self.typed[:-1]
        elif len(key) == 1 and key.isprintable():
            self.typed += key
        if self.prompt == "/":
            self.filter_text, self.selected = self.typed, 0

    def _drill_in(self) -> None:
        if self.drill is not None or self.view not in ("groups", "topics"):
            return
        snapshot_rows = self._last_rows()
        if not snapshot_rows:
            return
        row = snapshot_rows[min(self.selected, len(snapshot_rows) - 1)]
        if isinstance(row, GroupRow):
            self.drill = Drill("group", row.group, row.topic, self.filter_text)
        elif isinstance(row, TopicRow):
            self.drill = Drill("topic", row.topic, None, self.filter_text)
        self.selected, self.filter_text = 0, ""

    def _last_rows(self) -> list[Any]:
        snapshot = self.model.current
        if snapshot is None:
            return []
        return self._current(snapshot)[1]

    def _footer(self) -> str:
        if self.prompt is not None:
            return f"{self.prompt}{self.typed}_   (Enter keeps, Esc cancels)"
        return "? help  1-4 views  / filter  s sort  Enter drill  Esc back  p pause  q quit"
