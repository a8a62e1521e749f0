"""The registry flag: ``-n/--namesrvAddr`` in every sub-command, old spellings hidden aliases.

Parse-level through the real `boltmq` parser, plus one real `boltmq bench` run with an old
spelling against the session cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from boltmq import cli
from tests.boltmq.cli.test_bench import run_bench

if TYPE_CHECKING:
    from tests.client.helpers import RunningCluster

ADDRESS = "10.0.0.1:9876;10.0.0.2:9876"
SPELLINGS = ("-n", "--namesrvAddr", "--namesrv", "--namesrv-addr")

#: Sub-command -> (arguments before the flag, the namespace attribute the address lands in).
COMMANDS = {
    "admin": (["admin", "clusterList"], "namesrv_addr"),
    "monitor": (["monitor", "--once"], "namesrv"),
    "bench produce": (["bench", "produce"], "namesrv"),
    "bench consume": (["bench", "consume"], "namesrv"),
    "web": (["web"], "namesrvAddr"),
    "broker": (["broker"], "namesrvAddr"),
}


# The broker always spelled it -n/--namesrvAddr, as mqbroker does: it has no old spelling.
CASES = [
    (command, spelling)
    for command in sorted(COMMANDS)
    for spelling in (SPELLINGS[:2] if command == "broker" else SPELLINGS)
]


@pytest.mark.parametrize(("command", "spelling"), CASES)
def test_every_spelling_gives_the_same_address(command: str, spelling: str) -> None:
    before, dest = COMMANDS[command]
    address = "ws://127.0.0.1:9877/" if command == "web" else ADDRESS
    args = cli.parser().parse_args([*before, spelling, address])
    assert getattr(args, dest) == address


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_only_the_mqadmin_spelling(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before, _ = COMMANDS[command]
    with pytest.raises(SystemExit):
        cli.parser().parse_args([*before, "--help"])
    shown = capsys.readouterr().out
    assert "-n" in shown and "--namesrvAddr" in shown
    assert "--namesrv " not in shown and "--namesrv-addr" not in shown
    assert "--namesrv," not in shown


def test_bench_still_requires_the_flag_in_any_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "produce", "-t", "T"]) == 2
    assert "required: -n/--namesrvAddr" in capsys.readouterr().err


def test_an_old_spelling_runs_against_a_real_cluster(
    cluster: RunningCluster, unique: Callable[[str], str]
) -> None:
    topic = unique("OldFlag")
    code, out, err = run_bench(
        "produce", "--namesrv", cluster.namesrv, "-t", topic, "--message-count", "10",
        "-d", "20", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["messages"] == 10
