"""`boltmq admin` against a broker with aclEnable=true: --accessKey/--secretKey sign the verbs.

The command line runs its own trio loop, so the cluster runs in a thread with a loop of its
own; loopback only, ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from boltmq import EmbeddedCluster

from .helpers import run_admin

ACL = """
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: PUB|SUB
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
"""


@contextmanager
def acl_cluster(root: Path) -> Iterator[EmbeddedCluster]:
    """An embedded cluster with ACL on the broker, running in a thread of its own."""
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(ACL)
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with boltmq.embedded(root, acl_enable=True, plain_acl_file=str(acl_file)) as cluster:
            box["cluster"], box["token"], box["stop"] = (
                cluster, trio.lowlevel.current_trio_token(), trio.Event()
            )  # fmt: skip
            ready.set()
            await box["stop"].wait()

    def target() -> None:
        try:
            trio.run(main)
        finally:
            ready.set()

    thread = threading.Thread(target=target, name="acl-cluster", daemon=True)
    thread.start()
    assert ready.wait(60) and "cluster" in box, "the ACL cluster did not start"
    try:
        yield box["cluster"]
    finally:
        trio.from_thread.run_sync(box["stop"].set, trio_token=box["token"])
        thread.join(60)


def test_admin_verbs_with_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with acl_cluster(tmp_path) as cluster:
        namesrv, broker = cluster.registry_address, cluster.broker_address
        update = ["updateTopic", "-b", broker, "-t", "AclMade", "--timeout", "5"]

        code, _, err = run_admin(capsys, namesrv, *update)
        assert code == 1
        assert "No accessKey is configured" in err and "(--accessKey/--secretKey)" in err

        code, _, err = run_admin(
            capsys, namesrv, *update, "--accessKey", "producer1", "--secretKey", "producer-secret"
        )
        assert code == 1
        assert "Need admin permission" in err

        code, _, err = run_admin(
            capsys, namesrv, *update, "--accessKey", "adminuser", "--secretKey", "wrong-secret"
        )
        assert code == 1
        assert "Check signature failed for accessKey=adminuser" in err

        code, _, err = run_admin(
            capsys, namesrv, *update, "--accessKey", "adminuser", "--secretKey", "admin-secret"
        )
        assert code == 0, err
        assert "AclMade" in cluster.broker.topics.topic_config_table

        code, _, err = run_admin(capsys, namesrv, *update, "--accessKey", "adminuser")
        assert code == 1
        assert "the secret key is missing" in err
