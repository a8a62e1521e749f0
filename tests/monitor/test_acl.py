"""`boltmq monitor` against a broker with aclEnable=true: --accessKey/--secretKey sign its
requests; without them the broker shows as refusing, with the reason.

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq

from .helpers import monitor_command, monitor_env

pytestmark = pytest.mark.timeout(180)

ACL = """
accounts:
  - accessKey: opsuser
    secretKey: ops-secret
    admin: true
"""


async def snapshot(*args: str) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any]]:
    with trio.fail_after(90):
        done = await trio.run_process(
            monitor_command(*args, "--json", "--interval", "0.5"), capture_stdout=True,
            capture_stderr=True, check=False, env=monitor_env(),
        )  # fmt: skip
    return done, json.loads(done.stdout)


async def test_credentials_sign_the_monitor_s_requests(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    async with boltmq.embedded(tmp_path, acl_enable=True, plain_acl_file=str(acl_file)) as cluster:
        namesrv = cluster.registry_address
        signed, with_keys = await snapshot(
            "-n", namesrv, "--accessKey", "opsuser", "--secretKey", "ops-secret"
        )
        _, without_keys = await snapshot("-n", namesrv)
    [broker] = with_keys["brokers"]
    assert broker["error"] is None, signed.stderr.decode()
    assert broker["version"]  # the runtime info came back
    [refused] = without_keys["brokers"]
    assert refused["error"] is not None and "accessKey" in refused["error"], refused


def test_an_access_key_without_its_secret_is_refused() -> None:
    done = subprocess.run(
        monitor_command("--once", "--accessKey", "opsuser"), capture_output=True,
        env=monitor_env(), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert b"--accessKey and --secretKey go together" in done.stderr
