"""The jobs' registry flag: ``-n/--namesrvAddr``, the old ``--namesrv-addr`` a hidden alias.

Parse-level only (no Spark session, no cluster).
"""

from __future__ import annotations

import argparse

import pytest

from pipeline.jobs import export, replay, stats
from pipeline.jobs.common import check_cluster_arguments

JOBS = {
    "stats": (stats.setup, ["-t", "Orders", "-o", "stats-out"]),
    "export": (export.setup, ["-t", "Orders", "-o", "stats-out"]),
    "replay": (replay.setup, ["-t", "Orders", "-i", "rows-in"]),
}


def job_parser(name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"boltmq pipeline {name}")
    JOBS[name][0](parser)
    return parser


@pytest.mark.parametrize("spelling", ["-n", "--namesrvAddr", "--namesrv-addr", "--namesrv"])
@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_spelling_gives_the_same_address(name: str, spelling: str) -> None:
    parser = job_parser(name)
    args = parser.parse_args([*JOBS[name][1], spelling, "ns1:9876;ns2:9876"])
    check_cluster_arguments(parser, args)
    assert args.namesrv_addr == "ns1:9876;ns2:9876"


@pytest.mark.parametrize("name", sorted(JOBS))
def test_help_shows_only_the_mqadmin_spelling(name: str) -> None:
    shown = job_parser(name).format_help()
    assert "-n HOST:PORT[;HOST:PORT], --namesrvAddr HOST:PORT[;HOST:PORT]" in shown
    assert "--namesrv-addr" not in shown and "--namesrv " not in shown


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_flag_is_still_required(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = job_parser(name)
    args = parser.parse_args(JOBS[name][1])
    with pytest.raises(SystemExit) as exited:
        check_cluster_arguments(parser, args)
    assert exited.value.code == 2
    assert "required: -n/--namesrvAddr" in capsys.readouterr().err
