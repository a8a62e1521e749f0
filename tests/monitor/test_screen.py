"""The live screen driven in tmux against a cluster of node processes (one registry with a
websocket listener, masters broker-a and broker-b): the views switch, a filter narrows the
rows, drill-down shows a group's queues, the stalled group's row is red, a broker killed
mid-run shows as not answering while the rest keeps updating, and `q` exits cleanly.

Loopback only, free ports; every wait polls the captured pane with a deadline.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import boltmq
from boltmq.launcher import RestartRules
from tests.ports import free_port

from .helpers import (
    ROOT,
    STALLED_GROUP,
    STALLED_OFFSET,
    STALLED_TOPIC,
    TOPICS,
    make_traffic,
    monitor_command,
)

pytestmark = pytest.mark.timeout(240)


def write_spec(root: Path) -> tuple[Path, int]:
    """One registry and two masters, each with a websocket listener too (a websocket route
    names only brokers that have one); returns the spec and the registry's websocket port."""
    ws_port = free_port()
    ports = [free_port() for _ in range(3)]
    text = f"""
dataDir = "data"
logDir = "logs"
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
[[registry]]
listenPort = {ports[0]}
websocketListenPort = {ws_port}
[[broker.broker-a.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {ports[1]}
haListenPort = {free_port()}
websocketListenPort = {free_port()}
[[broker.broker-b.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {ports[2]}
haListenPort = {free_port()}
websocketListenPort = {free_port()}
"""
    path = root / "cluster.toml"
    path.write_text(text)
    return path, ws_port


class Pane:
    """`boltmq monitor` in a pane of a tmux server of its own (its own socket)."""

    def __init__(self, socket: Path, command: list[str]) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("this test drives the screen in tmux: install it (apt-get install tmux)")
        self.socket = socket
        # The monitor's exit status goes to a file: tmux's own record of it is not reliable.
        self.status_file = socket.with_suffix(".status")
        self.tmux("new-session", "-d", "-s", "mon", "-x", "200", "-y", "50",
                  f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES "
                  f"PYTHONPATH={shlex.quote(str(ROOT))} " + shlex.join(command)
                  + f"; echo $? > {shlex.quote(str(self.status_file))}")  # fmt: skip
        self.tmux("set-option", "-t", "mon", "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "mon", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "mon", "-l", text)

    def text(self, colours: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if colours else []), "-t", "mon")

    def exit_status(self) -> str | None:
        """The monitor's exit status once it has ended, else None."""
        try:
            text = self.status_file.read_text()
        except FileNotFoundError:
            return None
        return text.strip() if text.endswith("\n") else None

    async def wait(
        self,
        condition: Callable[[str], bool],
        what: str,
        timeout: float = 60,
        colours: bool = False,
    ) -> str:
        text = ""
        try:
            with trio.fail_after(timeout):
                while not condition(text := self.text(colours)):
                    await trio.sleep(0.2)
        except trio.TooSlowError:
            pytest.fail(f"the screen never showed {what}; it shows:\n{text}")
        return text

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True,
                       timeout=30, check=False)  # fmt: skip


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("│") if cell.strip()]


def line_with(text: str, *needles: str) -> str:
    return next((line for line in text.splitlines() if all(n in line for n in needles)), "")


async def test_live_screen_in_tmux(tmp_path: Path) -> None:
    spec, ws_port = write_spec(tmp_path)
    # A killed broker stays down for the rest of the test.
    rules = RestartRules(backoff_initial=600, backoff_max=600)
    async with boltmq.launch(spec, restart_rules=rules) as cluster:
        await make_traffic(cluster.namesrv_addr, cluster.address("broker-a-0"))
        command = monitor_command("-n", f"ws://127.0.0.1:{ws_port}/", "--interval", "0.5")
        pane = Pane(tmp_path / "tmux.sock", command)
        try:
            await drive(pane, cluster)
        finally:
            pane.close()


async def drive(pane: Pane, cluster: boltmq.RunningCluster) -> None:
    # Brokers view first: both masters answer.
    text = await pane.wait(lambda t: "broker-a" in t and "broker-b" in t and "V4_9_8" in t,
                           "both brokers")  # fmt: skip
    assert "up" in line_with(text, "registry ws://")
    # 2: topics view with every topic of the traffic; system topics hidden.
    pane.keys("2")
    text = await pane.wait(
        # MonStream's is the last row: whole, the table above it is too.
        lambda t: (
            all(topic in t for topic in TOPICS) and len(cells(line_with(t, "MonStream"))) == 7
        ),
        "the topics",
    )
    assert "TBW102" not in text
    assert cells(line_with(text, STALLED_TOPIC))[4:6] == ["30", "30"]  # max offsets, messages
    # / filters the rows.
    pane.keys("/")
    pane.type("Orders")
    pane.keys("Enter")
    await pane.wait(lambda t: "MonOrders" in t and "MonStream" not in t, "the filtered rows")
    # Enter on the one row left drills into the topic's queues.
    pane.keys("Enter")
    queues = TOPICS["MonOrders"][0]

    def topic_queues(t: str) -> bool:
        # Table rows only: an alert line can name broker-a too.
        rows = [cells(line) for line in t.splitlines() if cells(line)[:1] == ["broker-a"]]
        whole = len(rows) == queues and all(len(row) == 6 for row in rows)
        return "topic MonOrders: queues" in t and whole

    # (A capture can catch the screen mid-draw: wait for the whole table, not the title.)
    text = await pane.wait(topic_queues, "the topic's queues")
    rows = [cells(line) for line in text.splitlines() if cells(line)[:1] == ["broker-a"]]
    assert [row[1] for row in rows] == [str(q) for q in range(queues)]
    pane.keys("Escape")
    await pane.wait(lambda t: "MonOrders" in t and "MonStream" not in t, "the filter kept")
    pane.keys("Escape")
    await pane.wait(lambda t: "MonStream" in t, "the rows again after Esc")
    # :groups switches too; the stalled group's row says so and is red.
    pane.keys(":")
    pane.type("groups")
    pane.keys("Enter")
    text = await pane.wait(lambda t: "stalled" in line_with(t, STALLED_GROUP), "the stalled row")
    lag = TOPICS[STALLED_TOPIC][1] - STALLED_OFFSET
    assert str(lag) in line_with(text, STALLED_GROUP)
    coloured = await pane.wait(lambda t: "stalled" in line_with(t, STALLED_GROUP),
                               "the stalled row in colour", colours=True)  # fmt: skip
    assert "\x1b[31m" in line_with(coloured, STALLED_GROUP), repr(coloured)
    # Enter on the (filtered, selected) row drills into its queues; Esc comes back.
    pane.keys("/")
    pane.type(STALLED_GROUP)
    pane.keys("Enter", "Enter")
    text = await pane.wait(lambda t: f"group {STALLED_GROUP} on {STALLED_TOPIC}" in t,
                           "the drill-down")  # fmt: skip
    sent = TOPICS[STALLED_TOPIC][1]
    expected = [STALLED_TOPIC, "broker-a", "0", str(sent), str(STALLED_OFFSET), str(lag)]
    # Polled to the whole row: a capture can catch the screen mid-draw.
    await pane.wait(lambda t: cells(line_with(t, STALLED_TOPIC, "broker-a"))[:6] == expected,
                    f"queue 0 as {expected}")  # fmt: skip
    pane.keys("Escape")
    await pane.wait(lambda t: "queues (Esc back)" not in t and STALLED_GROUP in t, "groups")
    # 4: clients; ? help and any key closes it.
    pane.keys("4")
    await pane.wait(lambda t: "client id" in t, "the clients view")
    pane.keys("?")
    await pane.wait(lambda t: "drill into the selected group" in t, "the help")
    pane.keys("Escape")
    await pane.wait(lambda t: "drill into the selected group" not in t, "the help closed")
    pane.keys("1")
    # A broker killed mid-run: shown as such, while the rest keeps updating.
    await pane.wait(lambda t: "broker-b" in t and "V4_9_8" in line_with(t, "broker-b"),
                    "the brokers view")  # fmt: skip
    cluster.kill("broker-b-0")

    def broker_b_down(t: str) -> bool:
        row = cells(line_with(t, "broker-b"))
        return (
            len(row) >= 4
            and "V4_9_8" not in row
            and ("left the route" in row[-1] or "not answering" in t)
        )

    # broker-b greyed with its error (the registry drops it at once when its connection
    # closes, so "left the route"; a hung one would be "not answering" with the failure).
    text = await pane.wait(broker_b_down, "broker-b down")
    assert "V4_9_8" in line_with(text, "broker-a")
    assert "alerts 0" not in text
    clock = line_with(text, "refresh")
    await pane.wait(lambda t: line_with(t, "refresh") != clock and "V4_9_8" in
                    line_with(t, "broker-a"), "the refresh going on")  # fmt: skip
    # q quits cleanly.
    pane.keys("q")
    with trio.fail_after(30):
        while (status := pane.exit_status()) is None:
            await trio.sleep(0.1)
    assert status == "0"
