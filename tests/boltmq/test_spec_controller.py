"""Controller mode in the cluster spec: [[controller]] nodes (one, or several over Raft) and
broker groups whose master the controller elects. Pure unit tests: nothing is started.
A refusal is checked by its whole message (file, key path, why).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.spec import BROKER, CONTROLLER, REGISTRY, ClusterSpec, SpecError, parse_spec

SPEC_FILE = Path("cluster.toml")

REGISTRY_TOML = "[[registry]]\nlistenPort = 9876\n"
GROUP = """
[broker.broker-c]
controllerMode = true
[[broker.broker-c.node]]
listenPort = 10941
[[broker.broker-c.node]]
listenPort = 10951
brokerRole = "ASYNC_MASTER"
"""


def parse(text: str) -> ClusterSpec:
    return parse_spec(text, path=SPEC_FILE)


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse(text)
    return str(caught.value)


def test_one_controller_needs_no_raft_and_starts_first() -> None:
    spec = parse(REGISTRY_TOML + GROUP + "[[controller]]\nlistenPort = 19878\n")
    assert [(n.name, n.kind, n.rank) for n in spec.nodes] == [
        ("controller-1", CONTROLLER, -1), ("registry-1", REGISTRY, 0),
        ("broker-c-n1", BROKER, 2), ("broker-c-n2", BROKER, 2),
    ]  # fmt: skip
    controller = spec.controllers[0]
    assert "controllerDLegerPeers" not in controller.properties
    assert controller.properties["listenPort"] == "19878"
    assert controller.properties["controllerStorePath"].endswith("data/controller-1/store")
    assert controller.listeners == (("listenPort", 19878),)
    assert spec.controller_addr == "127.0.0.1:19878"


def test_several_controllers_get_their_raft_peers_and_self_ids() -> None:
    spec = parse(
        REGISTRY_TOML
        + "[[controller]]\n[[controller]]\nlistenPort = 9888\nraftPort = 9950\n[[controller]]\n"
        "listenPort = 9898\nscanNotActiveBrokerInterval = 1000\n"
    )
    peers = "n0-127.0.0.1:9879;n1-127.0.0.1:9950;n2-127.0.0.1:9899"
    assert [(c.port, c.properties["controllerDLegerPeers"], c.properties["controllerDLegerSelfId"])
            for c in spec.controllers] == [
        (9878, peers, "n0"), (9888, peers, "n1"), (9898, peers, "n2"),
    ]  # fmt: skip
    assert spec.controllers[2].properties["scanNotActiveBrokerInterval"] == "1000"
    assert spec.controllers[1].listeners == (("listenPort", 9888), ("raftPort", 9950))
    assert spec.controller_addr == "127.0.0.1:9878;127.0.0.1:9888;127.0.0.1:9898"


def test_controller_mode_brokers_are_given_the_controllers_and_no_id() -> None:
    spec = parse(REGISTRY_TOML + GROUP + "[[controller]]\n[[controller]]\nlistenPort = 9888\n")
    first, second = spec.brokers
    assert first.properties["enableControllerMode"] == "true"
    assert first.properties["controllerAddr"] == "127.0.0.1:9878;127.0.0.1:9888"
    assert "brokerId" not in first.properties
    assert (first.role, second.properties["brokerRole"]) == ("controller mode", "ASYNC_MASTER")
    assert first.properties["storePathRootDir"].endswith("data/broker-c-n1/store")
    assert first.properties["totalReplicas"] == "2"  # the group's size, unless a node says
    assert ("haListenPort", 10942) in first.listeners


def test_enable_controller_mode_on_every_node_is_controller_mode_too() -> None:
    text = REGISTRY_TOML + "[[controller]]\n"
    text += "[defaults]\nenableControllerMode = true\n[[broker.b.node]]\n[[broker.b.node]]\n"
    text += "listenPort = 10921\n"
    assert [n.role for n in parse(text).brokers] == ["controller mode", "controller mode"]


def test_a_registry_embedding_the_controller_serves_controller_mode() -> None:
    spec = parse(
        "[[registry]]\nlistenPort = 9876\nenableControllerInNamesrv = true\n[[registry]]\n" + GROUP
    )
    assert spec.controllers == ()
    assert spec.brokers[0].properties["controllerAddr"] == "127.0.0.1:9876"
    # Its controller keeps its state under dataDir, and takes the controller's keys.
    registry = spec.registries[0]
    assert registry.properties["controllerStorePath"].endswith("data/registry-1/controller")
    spec = parse(
        "[[registry]]\nenableControllerInNamesrv = true\nenableElectUncleanMaster = true\n" + GROUP
    )
    assert spec.registries[0].properties["enableElectUncleanMaster"] == "true"
    assert refusal("[[registry]]\nenableElectUncleanMaster = true\n") == (
        "cluster.toml: registry[1].enableElectUncleanMaster: is a controller key: set "
        "enableControllerInNamesrv = true to embed one"
    )
    assert "controllerType" in refusal(
        "[[registry]]\nenableControllerInNamesrv = true\ncontrollerType = 'Paxos'\n"
    )


def test_refusals_name_the_key() -> None:
    assert refusal(REGISTRY_TOML + GROUP) == (
        "cluster.toml: broker.broker-c.controllerMode: a controller-mode group needs a "
        "controller: add a [[controller]] node, or enableControllerInNamesrv = true to a "
        "[[registry]]"
    )
    with_id = GROUP.replace("listenPort = 10941", "listenPort = 10941\nbrokerId = 0")
    # minInSyncReplicas above the group's size with allAckInSyncStateSet: refused by the key.
    strict = GROUP.replace("controllerMode = true", "controllerMode = true\n").replace(
        "listenPort = 10941",
        "listenPort = 10941\nallAckInSyncStateSet = true\nminInSyncReplicas = 3",
    )
    assert "minInSyncReplicas" in refusal(REGISTRY_TOML + "[[controller]]\n" + strict)
    assert refusal(REGISTRY_TOML + "[[controller]]\n" + with_id).startswith(
        "cluster.toml: broker.broker-c.node[1].brokerId: in controller mode the controller "
        "assigns broker ids"
    )
    assert refusal(REGISTRY_TOML + "[[controller]]\ncontrollerDLegerPeers = 'x'\n") == (
        "cluster.toml: controller[1].controllerDLegerPeers: is set by the launcher from the "
        "list of [[controller]] nodes"
    )
    assert refusal(REGISTRY_TOML + "[[controller]]\nlistenport = 1\n") == (
        "cluster.toml: controller[1].listenport: unknown key (did you mean listenPort?)"
    )
    assert refusal(REGISTRY_TOML + "[[controller]]\nlistenPort = 9876\n") == (
        "cluster.toml: controller[1].listenPort: port 9876 is registry[1].listenPort already"
    )
    assert "scanNotActiveBrokerInterval" in refusal(
        REGISTRY_TOML + "[[controller]]\nscanNotActiveBrokerInterval = 0\n"
    )
    assert refusal(REGISTRY_TOML + "[[controller]]\n[[controller]]\nraftPort = 9879\n") == (
        "cluster.toml: controller[2].raftPort: port 9879 is controller[1].raftPort already"
    )
    mixed = REGISTRY_TOML + "[[controller]]\n[[broker.b.node]]\nenableControllerMode = true\n"
    mixed += "[[broker.b.node]]\nlistenPort = 10921\nbrokerId = 1\nbrokerRole = 'SLAVE'\n"
    assert refusal(mixed).startswith(
        "cluster.toml: broker.b.node: some nodes set enableControllerMode and some do not"
    )
    assert refusal("controller = 1\n" + REGISTRY_TOML) == (
        "cluster.toml: controller: must be an array of tables ([[controller]])"
    )
