"""Controller-mode settings a broker must refuse at start, each with a line naming the key.

Controller mode without controllerAddr; a broker metadata file (brokerIdentity) naming another
cluster or group than broker.conf; a group of one that could never acknowledge a put
(allAckInSyncStateSet with minInSyncReplicas above 1). Each broker process exits non-zero
before it serves, saying which key is wrong, and the metadata file is left as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ports import free_port
from tests.reliability.nodes import Node, broker_node, controller_broker_node

pytestmark = pytest.mark.timeout(120)


async def refused(node: Node) -> tuple[int, str]:
    """Run ``node`` until it exits (it must not start serving); its exit code and log."""
    node.launch()
    code = await node.wait_exit(60)
    return code, node.log_text()


async def test_controller_mode_without_controller_addr_is_refused(tmp_path: Path) -> None:
    node = broker_node(tmp_path, "broker", "127.0.0.1:1", enableControllerMode="true")
    code, text = await refused(node)
    assert code != 0, text
    assert "controllerAddr" in text, text
    assert "ready on" not in text


async def test_a_metadata_file_naming_another_group_is_refused(tmp_path: Path) -> None:
    node = controller_broker_node(
        tmp_path, "broker", "127.0.0.1:1", f"127.0.0.1:{free_port()}", broker_name="broker-a"
    )
    identity = node.store / "brokerIdentity"
    identity.parent.mkdir(parents=True)
    identity.write_text("DefaultCluster#broker-b#2")
    code, text = await refused(node)
    assert code != 0, text
    assert "brokerName" in text and "broker-b" in text, text
    assert identity.read_text() == "DefaultCluster#broker-b#2"
    assert "ready on" not in text


async def test_a_group_of_one_that_needs_more_in_sync_replicas_is_refused(tmp_path: Path) -> None:
    node = controller_broker_node(
        tmp_path, "broker", "127.0.0.1:1", f"127.0.0.1:{free_port()}",
        allAckInSyncStateSet="true", minInSyncReplicas=2,
    )  # fmt: skip
    code, text = await refused(node)
    assert code != 0, text
    assert "minInSyncReplicas" in text, text
    assert "ready on" not in text
