"""storeType=memory: a broker with no file at all, and what it refuses at start.

The broker's core tests (send and pull, long polling, offsets, retries and dead letters,
delays, transactions, queries) run on both stores through the parametrised ``cluster``
fixture; this module covers what is the memory store's own: no file under the store root,
the start line, and the refusals of what it cannot do (replication, a slave's role), in one
line before anything starts. Loopback only, ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import boltmq
from actors.broker.config import BrokerConfig, ConfigError
from boltmq.spec import SpecError, parse_spec
from protocol import RemotingClient, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import UpdateConsumerOffsetRequestHeader, encode_header
from protocol.message import iter_records
from storage import BrokerRole, MemoryMessageStore
from tests.actors.broker.helpers import SMALL_FILES, call, pull_request, send_request

ROOT = Path(__file__).resolve().parents[3]


async def test_a_memory_broker_serves_and_writes_no_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="boltmq.broker")
    async with boltmq.embedded(tmp_path, store="memory", **SMALL_FILES) as cluster:
        assert isinstance(cluster.broker.store, MemoryMessageStore)
        address = cluster.broker_address
        async with RemotingClient() as client:
            for _ in range(200):  # past the file store's 256 KiB files here
                answer = await call(client, address, send_request("Mem", b"x" * 2000, queue_id=0))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            pulled = await call(client, address, pull_request("Mem", 0, max_msgs=32))
            assert pulled.code == ResponseCode.SUCCESS
            assert len(list(iter_records(pulled.body or b""))) == 32
            header = UpdateConsumerOffsetRequestHeader(
                consumer_group="CG", topic="Mem", queue_id=0, commit_offset=32
            )
            committed = await call(
                client,
                address,
                RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)),
            )
            assert committed.code == ResponseCode.SUCCESS
        assert cluster.broker.offsets.query_offset("CG", "Mem", 0) == 32
    store_root = tmp_path / "store"
    left = [p.relative_to(tmp_path) for p in store_root.rglob("*")] if store_root.exists() else []
    assert left == []  # no commit log, no consume queue, no index, no config/*.json
    assert any("store in memory" in r.getMessage() for r in caplog.records)


def test_a_memory_store_refuses_a_replicated_role_in_one_line() -> None:
    for role in (BrokerRole.SLAVE, BrokerRole.SYNC_MASTER):
        with pytest.raises(ConfigError) as caught:
            BrokerConfig(store_type="memory", broker_role=role)
        message = str(caught.value)
        assert "storeType=memory" in message and "ASYNC_MASTER" in message
        assert "\n" not in message
    with pytest.raises(ValueError, match="storeType is 'disk'; use one of file, memory"):
        BrokerConfig(store_type="disk")


def test_a_spec_with_a_memory_slave_is_refused_before_anything_starts() -> None:
    spec = (
        "[[registry]]\nlistenPort = 9876\n"
        '[[broker.broker-a.node]]\nlistenPort = 10911\nstoreType = "memory"\n'
        "[[broker.broker-a.node]]\nlistenPort = 10921\nbrokerId = 1\n"
        'brokerRole = "SLAVE"\nstoreType = "memory"\n'
    )
    with pytest.raises(SpecError, match="storeType=memory"):
        parse_spec(spec, path=Path("cluster.toml"))


async def test_the_broker_command_refuses_a_memory_slave_with_exit_2(tmp_path: Path) -> None:
    result = await trio.run_process(
        [sys.executable, "-m", "boltmq.cli", "broker", "--storeType", "memory",
         "--brokerRole", "SLAVE", "--brokerId", "1"],
        cwd=ROOT, env={**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_stderr=True, check=False, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "storeType=memory" in lines[0], lines
