"""Running the monitor: the live full-screen view (rich Live, keys read from the terminal in
cbreak mode), and one snapshot for ``--once`` and ``--json``.

The screen is rich's Live on the alternate screen; keys are read by a trio task from standard
input. Own key handling rather than textual: the views are rich tables either way, and the
keys are a dozen single characters, so a trio task reading stdin keeps the monitor on the
same event loop as the client with no second framework.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
import tty
from collections.abc import AsyncIterator, Iterator, Sequence

import attrs
import trio
from rich.console import Console
from rich.live import Live

from client.instance import ClientInstance
from monitor.collector import DETAIL_BUDGET, Collector
from monitor.model import Model, Thresholds
from monitor.screen import BACKSPACE, DOWN, ENTER, ESC, UP, Screen
from monitor.snapshot import Snapshot
from monitor.views import snapshot_renderable


@attrs.frozen
class Settings:
    """What the command line chose."""

    namesrv_addr: Sequence[str]
    interval: float = 1.0
    system: bool = False
    detail_budget: int = DETAIL_BUDGET
    thresholds: Thresholds = attrs.Factory(Thresholds)
    timeout: float = 3.0
    #: An account of the cluster's plain_acl.yml to sign requests with (aclEnable=true).
    access_key: str | None = None
    secret_key: str | None = attrs.field(default=None, repr=False)
    #: Controller mode: the controller(s) to ask (None: the controller leader a broker reports).
    controller_addr: str | None = None

    def open_client(self) -> ClientInstance:
        """The client instance the monitor reads the cluster through."""
        return ClientInstance(
            list(self.namesrv_addr), timeout=self.timeout,
            access_key=self.access_key, secret_key=self.secret_key,
        )  # fmt: skip


async def take_snapshot(settings: Settings, *, samples: int = 2) -> Snapshot:
    """``samples`` refreshes ``interval`` apart (two give rates); the last one's snapshot."""
    model = Model(settings.thresholds, system=settings.system)
    async with settings.open_client() as instance:
        collector = Collector(
            instance, detail_budget=settings.detail_budget, timeout=settings.timeout,
            controller_addr=settings.controller_addr,
        )  # fmt: skip
        snapshot = model.update(await collector.sample())
        for _ in range(samples - 1):
            await trio.sleep(settings.interval)
            snapshot = model.update(await collector.sample())
    return snapshot


def print_snapshot(snapshot: Snapshot, *, as_json: bool) -> None:
    """Print ``snapshot`` as JSON or as the views' tables (colours only on a terminal)."""
    if as_json:
        sys.stdout.buffer.write(snapshot.to_json() + b"\n")
        sys.stdout.flush()
        return
    console = Console(width=200) if not sys.stdout.isatty() else Console()
    console.print(snapshot_renderable(snapshot))


async def run_screen(settings: Settings) -> None:
    """The live view until ``q`` (or Ctrl-C)."""
    model = Model(settings.thresholds, system=settings.system)
    screen = Screen(model)
    console = Console()
    changed = trio.Event()
    async with settings.open_client() as instance:
        collector = Collector(
            instance, detail_budget=settings.detail_budget, timeout=settings.timeout,
            controller_addr=settings.controller_addr,
        )  # fmt: skip
        with _cbreak(), Live(console=console, screen=True, auto_refresh=False) as live:

            def draw() -> None:
                snapshot = model.current
                live.update(screen.render(snapshot, console.size.height), refresh=True)

            draw()
            async with trio.open_nursery() as nursery:

                async def refresh() -> None:
                    while True:
                        # A refresh every interval, however long the last one took.
                        next_refresh = trio.current_time() + settings.interval
                        if not screen.paused:
                            collector.wanted = screen.wanted()
                            model.update(await collector.sample())
                            draw()
                        with trio.move_on_at(next_refresh):
                            await changed.wait()

                async def keys() -> None:
                    nonlocal changed
                    async for key in _read_keys():
                        drill_before = screen.drill
                        screen.key(key)
                        if screen.quit:
                            nursery.cancel_scope.cancel()
                            return
                        draw()
                        if screen.drill != drill_before and screen.drill is not None:
                            changed.set()  # fetch the drill-down's subject now
                            changed = trio.Event()

                nursery.start_soon(refresh)
                nursery.start_soon(keys)


_ESCAPES = {b"\x1b[A": UP, b"\x1b[B": DOWN, b"\x1bOA": UP, b"\x1bOB": DOWN}


async def _read_keys() -> AsyncIterator[str]:
    """Key names as the terminal sends them."""
    # A duplicate descriptor: trio makes it non-blocking and restores it when closed.
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stream:
        while True:
            data = await stream.receive_some(256)
            if not data:
                return
            for key in _parse(data):
                yield key


def _parse(data: bytes) -> list[str]:
    """Key names in one read from the terminal."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        for sequence, name in _ESCAPES.items():
            if data.startswith(sequence, i):
                keys.append(name)
                i += len(sequence)
                break
        else:
            byte = data[i : i + 1]
            i += 1
            if byte == b"\x1b":
                if i < len(data) and data[i : i + 1] == b"[":
                    # another escape sequence (a function key): skip it whole
                    while i < len(data) and not data[i : i + 1].isalpha() and data[i] != 0x7E:
                        i += 1
                    i += 1
                    continue
                keys.append(ESC)
            elif byte in (b"\r", b"\n"):
                keys.append(ENTER)
            elif byte in (b"\x7f", b"\x08"):
                keys.append(BACKSPACE)
            elif byte == b"\x03":
                keys.append("q")
            else:
                keys.append(byte.decode("latin-1"))
    return keys


@contextlib.contextmanager
def _cbreak() -> Iterator[None]:
    """Keys one at a time, no echo; the terminal restored on the way out."""
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        raise SystemExit("boltmq monitor: the live view needs a terminal; use --once or --json")
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
