"""The broker names the codec path it runs: its start line, GET_BROKER_RUNTIME_INFO (``codecs``),
/metrics (``boltmq_codecs_info``) and ``boltmq --version``.

In process the path is this test run's (compiled where ``./dev test`` built the extension); a
`boltmq broker` subprocess with ``BOLTMQ_PURE=1`` shows the pure path with its reason.
Loopback only, ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, codecs_status
from protocol.bodies import KVTable
from supervisors.metrics_http import MetricsExporterType
from tests.actors.broker.services.test_metrics import scrape
from tests.boltmq.cli.test_broker import ROOT, start, stop

METRICS_AT = re.compile(r"metrics at :(\d+)/metrics")


async def test_the_broker_names_its_codec_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="boltmq.broker")
    status = codecs_status()
    async with boltmq.embedded(
        tmp_path,
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
        metrics_prom_exporter_host="127.0.0.1",
    ) as cluster:
        (ready,) = [r.getMessage() for r in caplog.records if " ready on " in r.getMessage()]
        assert ready.endswith(f"; codecs: {status}"), ready
        with trio.fail_after(10):
            info = await runtime_info(cluster.broker_address)
            assert cluster.broker.metrics_port is not None
            samples = await scrape(cluster.broker.metrics_port)
    assert info["codecs"] == status
    path, _, reason = status.partition(" (")
    (sample,) = [labels for name, labels in samples if name == "boltmq_codecs_info"]
    assert {("path", path), ("reason", reason.removesuffix(")"))} <= sample
    assert samples[("boltmq_codecs_info", sample)] == 1


async def test_a_pure_broker_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOLTMQ_PURE", "1")  # for the subprocesses: this one has imported already
    version = subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "--version"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert version.stdout.strip().endswith(" (codecs: pure (BOLTMQ_PURE=1))"), version.stdout
    proc, lines, found = await start(
        ["broker", "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable",
         "false", "--storePathRootDir", str(tmp_path / "data"), "--metricsExporterType", "PROM",
         "--metricsPromExporterPort", "0", "--metricsPromExporterHost", "127.0.0.1"],
        tmp_path,
    )  # fmt: skip
    try:
        (ready,) = [line for line in lines if " ready on " in line]
        assert ready.endswith("; codecs: pure (BOLTMQ_PURE=1)"), ready
        match = METRICS_AT.search(ready)
        assert match is not None, ready
        with trio.fail_after(10):
            info = await runtime_info(found["broker"])
            samples = await scrape(int(match.group(1)))
        assert info["codecs"] == "pure (BOLTMQ_PURE=1)"
        (sample,) = [labels for name, labels in samples if name == "boltmq_codecs_info"]
        assert {("path", "pure"), ("reason", "BOLTMQ_PURE=1")} <= sample
    finally:
        assert await stop(proc, lines) == 0, lines


async def runtime_info(address: str) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table."""
    async with RemotingClient() as client:
        answer = await client.invoke(
            address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        )
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    return KVTable.from_json(answer.body).table
