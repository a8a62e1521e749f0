"""The `boltmq` command line: help, version, the sub-command table, log levels, signals.

A sub-command under test is a real entry added to the table for the test.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Iterator

import pytest
import trio

from boltmq import cli
from protocol import codecs_status
from supervisors import ChildSpec, Supervisor


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """`main` configures the root logger; put it back as the other tests expect it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> dict[str, cli.Command]:
    """The command table, restored after the test."""
    table = dict(cli.COMMANDS)
    monkeypatch.setattr(cli, "COMMANDS", table)
    return table


def say(parser: argparse.ArgumentParser) -> cli.Runner:
    parser.add_argument("--word", required=True, help="what to say")

    def run(args: argparse.Namespace) -> int:
        print(f"said {args.word} at {logging.getLogger().getEffectiveLevel()}")
        return 7

    return run


def test_help_lists_the_sub_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: boltmq" in out
    for name in ("registry", "broker", "cluster"):
        assert name in out
    assert "run a registry (RocketMQ's NameServer)" in out
    assert "--log-level" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    status = codecs_status()
    assert capsys.readouterr().out.strip() == f"boltmq {cli.version()} (codecs: {status})"


def test_no_sub_command_prints_usage_and_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: boltmq" in capsys.readouterr().err


def test_an_unknown_sub_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nonsense"]) == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_every_sub_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for name in cli.COMMANDS:
        assert cli.main([name, "--help"]) == 0
        help_text = capsys.readouterr().out
        assert f"usage: boltmq {name}" in help_text
        assert "example" in help_text and f"boltmq {name}" in help_text.split("example")[-1]


def test_a_sub_command_of_the_table_adds_arguments_and_runs(
    commands: dict[str, cli.Command], capsys: pytest.CaptureFixture[str]
) -> None:
    commands["say"] = cli.Command("say a word", "example:\n  boltmq say --word hi", say)
    assert cli.main(["say", "--word", "hello", "--log-level", "DEBUG"]) == 7
    assert capsys.readouterr().out == f"said hello at {logging.DEBUG}\n"
    assert cli.main(["--log-level", "warning", "say", "--word", "hi"]) == 7
    assert capsys.readouterr().out == f"said hi at {logging.WARNING}\n"
    assert cli.main(["say", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "usage: boltmq say" in help_text
    assert "what to say" in help_text
    assert cli.main(["say"]) == 2
    assert "the following arguments are required: --word" in capsys.readouterr().err


def test_log_lines_carry_time_level_and_logger(capsys: pytest.CaptureFixture[str]) -> None:
    cli.configure_logging("info")
    cli.configure_logging("info")  # a second call replaces the handler, no doubled lines
    logging.getLogger("boltmq.test").info("hello %s", "there")
    err = capsys.readouterr().err
    assert err.count("hello there") == 1
    line = err.strip().splitlines()[-1]
    assert line.endswith("INFO    boltmq.test: hello there")
    assert line[:4].isdigit() and line[4] == "-"  # starts with the date


def test_sigterm_stops_the_tree_in_reverse_order_and_exits_0(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped: list[str] = []

    def child(name: str) -> ChildSpec:
        async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                stopped.append(name)

        return ChildSpec.function(name, run)

    async def serve() -> None:
        supervisor = Supervisor("root", [child("registry"), child("broker")])
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervisor.run)
                os.kill(os.getpid(), signal.SIGTERM)
                await trio.sleep_forever()

    with caplog.at_level(logging.INFO, logger="boltmq"):
        assert cli.run_until_signalled(serve) == 0
    assert stopped == ["broker", "registry"]
    assert "received SIGTERM; stopping" in caplog.messages
    assert caplog.messages[-1] == "stopped"


def test_a_failing_main_is_logged_and_exits_1(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        await trio.sleep(0)
        raise OSError("address already in use")

    with caplog.at_level(logging.INFO, logger="boltmq"):
        assert cli.run_until_signalled(fail) == 1
    assert "failed: address already in use" in caplog.messages
