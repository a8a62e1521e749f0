"""The cluster spec checker (`boltmq.spec`): what a good spec becomes, and every refusal.

Pure unit tests: no network, no processes, nothing started. Specs are parsed from text (the
file name in messages is ``cluster.toml``) or loaded from a real file under ``tmp_path`` when
the test is about paths. A refusal is checked by its whole message (file, key path, why), so
a message that loses its key path or its reason fails here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from boltmq.cli._run import EXIT_USAGE
from boltmq.cli.broker import run_spec
from boltmq.spec import (
    BROKER,
    CONTROLLER,
    EXAMPLE_SPEC,
    PROXY,
    REGISTRY,
    ClusterSpec,
    NodeSpec,
    SpecError,
    load_spec,
    parse_spec,
)

SPEC_FILE = Path("cluster.toml")
#: The smallest registry section, for specs about brokers.
ONE_REGISTRY = "[[registry]]\nlistenPort = 9876\n"


def parse(text: str) -> ClusterSpec:
    return parse_spec(text, path=SPEC_FILE)


def refusal(text: str) -> str:
    """The message `parse_spec` refuses ``text`` with."""
    with pytest.raises(SpecError) as caught:
        parse(text)
    return str(caught.value)


def broker(body: str, group: str = "broker-a") -> str:
    """One ``[[broker.<group>.node]]`` table with ``body``."""
    return f"[[broker.{group}.node]]\n{body}\n"


def example(tmp_path: Path) -> ClusterSpec:
    path = tmp_path / "cluster.toml"
    path.write_text(EXAMPLE_SPEC, encoding="utf-8")
    return load_spec(path)


# -- the example spec ---------------------------------------------------------------------------


def test_example_has_its_nodes_in_start_order(tmp_path: Path) -> None:
    spec = example(tmp_path)
    assert spec.names() == [
        "controller-1", "controller-2", "controller-3", "registry-1", "registry-2",
        "broker-a-0", "broker-b-0", "broker-a-1", "broker-c-n1", "broker-c-n2", "broker-c-n3",
        "proxy-1",
    ]  # fmt: skip
    assert [node.kind for node in spec.nodes] == [
        CONTROLLER, CONTROLLER, CONTROLLER, REGISTRY, REGISTRY, BROKER, BROKER, BROKER, BROKER,
        BROKER, BROKER, PROXY,
    ]  # fmt: skip
    assert [node.role for node in spec.nodes] == [
        "controller", "controller", "controller", "registry", "registry", "SYNC_MASTER",
        "ASYNC_MASTER", "SLAVE", "controller mode", "controller mode", "controller mode", "proxy",
    ]  # fmt: skip
    assert [node.rank for node in spec.nodes] == [-1, -1, -1, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    assert [node.port for node in spec.nodes] == [
        9878, 9888, 9898, 9876, 9886, 10911, 10931, 10921, 10941, 10951, 10961, 8081,
    ]  # fmt: skip
    assert [node.in_process for node in spec.nodes] == [False] * 12
    assert spec.controllers == spec.nodes[:3]
    assert spec.registries == spec.nodes[3:5]
    assert spec.brokers == spec.nodes[5:11]
    assert spec.proxies == spec.nodes[11:]
    assert spec.proxies[0].properties["namesrvAddr"] == spec.namesrv_addr
    assert spec.path == tmp_path / "cluster.toml"


def test_proxy_nodes_take_rmq_proxy_json_keys_and_are_checked(tmp_path: Path) -> None:
    base = "[[registry]]\nlistenPort = 19876\n"
    spec = parse_spec(
        base + "[[proxy]]\n[[proxy]]\ngrpcServerPort = 18095\nmaxMessageSize = 1024\n",
        base_dir=tmp_path,
    )
    assert [(n.name, n.port, n.bind_address) for n in spec.proxies] == [
        ("proxy-1", 8081, "127.0.0.1"), ("proxy-2", 18095, "127.0.0.1"),
    ]  # fmt: skip
    with pytest.raises(SpecError, match=r"proxy\[1\]\.grpcServerPort: port 19876 is registry"):
        parse_spec(base + "[[proxy]]\ngrpcServerPort = 19876\n", base_dir=tmp_path)
    with pytest.raises(SpecError, match=r"proxy\[1\].*maxMessageSize must be"):
        parse_spec(base + '[[proxy]]\nmaxMessageSize = "lots"\n', base_dir=tmp_path)
    with pytest.raises(SpecError, match=r"proxy\[1\]\.namesrvAddr: is set by the launcher"):
        parse_spec(base + '[[proxy]]\nnamesrvAddr = "1.2.3.4:9876"\n', base_dir=tmp_path)
    with pytest.raises(SpecError, match=r"proxy\[1\]\.grpcPort"):
        parse_spec(base + "[[proxy]]\ngrpcPort = 1\n", base_dir=tmp_path)


def test_example_namesrv_addr_lists_every_registry(tmp_path: Path) -> None:
    spec = example(tmp_path)
    assert spec.namesrv_addr == "127.0.0.1:9876;127.0.0.1:9886"
    for node in spec.brokers:
        assert node.properties["namesrvAddr"] == spec.namesrv_addr


def test_example_registry_properties(tmp_path: Path) -> None:
    spec = example(tmp_path)
    data = (tmp_path / "data").resolve()
    first, second = spec.registries
    assert dict(first.properties) == {
        "listenPort": "9876",
        "websocketListenPort": "9877",
        "bindAddress": "127.0.0.1",
        "kvConfigPath": str(data / "registry-1" / "kvConfig.json"),
    }
    assert dict(second.properties) == {
        "listenPort": "9886",
        "bindAddress": "127.0.0.1",
        "kvConfigPath": str(data / "registry-2" / "kvConfig.json"),
    }
    assert first.broker_name == ""
    assert first.data_dir == data / "registry-1"


def test_example_broker_properties(tmp_path: Path) -> None:
    spec = example(tmp_path)
    data = (tmp_path / "data").resolve()
    master_a = spec.node("broker-a-0")
    assert dict(master_a.properties) == {
        "brokerClusterName": "DefaultCluster",
        "flushDiskType": "SYNC_FLUSH",  # the node's own key wins over [defaults]
        "brokerId": "0",
        "brokerRole": "SYNC_MASTER",
        "listenPort": "10911",
        "haListenPort": "10912",
        "websocketListenPort": "10913",
        "brokerName": "broker-a",
        "namesrvAddr": "127.0.0.1:9876;127.0.0.1:9886",
        "bindAddress": "127.0.0.1",
        "storePathRootDir": str(data / "broker-a-0" / "store"),
    }
    slave_a = spec.node("broker-a-1")
    assert slave_a.properties["flushDiskType"] == "ASYNC_FLUSH"  # from [defaults]
    assert slave_a.properties["brokerName"] == "broker-a"
    assert slave_a.properties["brokerId"] == "1"
    assert slave_a.properties["storePathRootDir"] == str(data / "broker-a-1" / "store")
    master_b = spec.node("broker-b-0")
    assert master_b.broker_name == "broker-b"
    assert master_b.properties["brokerClusterName"] == "DefaultCluster"
    assert master_b.properties["storePathRootDir"] == str(data / "broker-b-0" / "store")
    assert master_b.log_file == (tmp_path / "logs").resolve() / "broker-b-0.log"


def test_node_lookup_names_the_known_nodes(tmp_path: Path) -> None:
    spec = example(tmp_path)
    with pytest.raises(KeyError) as caught:
        spec.node("broker-d-0")
    assert caught.value.args[0] == (
        "no node 'broker-d-0' in the spec (nodes: controller-1, controller-2, controller-3, "
        "registry-1, registry-2, broker-a-0, broker-b-0, broker-a-1, broker-c-n1, broker-c-n2, "
        "broker-c-n3, proxy-1)"
    )


# -- defaults and paths -------------------------------------------------------------------------


def test_defaults_merge_under_a_nodes_own_keys() -> None:
    spec = parse(
        '[defaults]\nbrokerClusterName = "Shared"\nmaxMessageSize = 1024\nslaveReadEnable = true\n'
        + ONE_REGISTRY
        + broker("listenPort = 10911\nmaxMessageSize = 2048")
    )
    properties = spec.node("broker-a-0").properties
    assert properties["brokerClusterName"] == "Shared"
    assert properties["maxMessageSize"] == "2048"
    assert properties["slaveReadEnable"] == "true"  # TOML booleans become RocketMQ text


def test_unset_ports_take_rocketmqs_defaults() -> None:
    spec = parse("[[registry]]\n[[registry]]\n" + broker(""))
    assert [node.port for node in spec.nodes] == [9876, 9886, 10911]
    assert spec.node("broker-a-0").properties["listenPort"] == "10911"
    assert spec.node("broker-a-0").role == "ASYNC_MASTER"


def test_in_process_at_the_top_is_every_nodes_default_and_a_node_can_override() -> None:
    spec = parse(
        "inProcess = true\n" + ONE_REGISTRY + broker("listenPort = 10911\ninProcess = false")
    )
    assert [node.in_process for node in spec.nodes] == [True, False]
    assert "inProcess" not in spec.node("broker-a-0").properties


def test_relative_dirs_start_from_the_spec_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "cluster.toml").write_text(
        'dataDir = "state/data"\nlogDir = "../logs"\n' + ONE_REGISTRY + broker(""),
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(conf / "cluster.toml")
    base = conf.resolve()
    assert spec.data_dir == base / "state" / "data"
    assert spec.log_dir == base / "../logs"
    registry, master = spec.nodes
    assert registry.data_dir == base / "state" / "data" / "registry-1"
    assert registry.log_file == base / "../logs" / "registry-1.log"
    assert registry.properties["kvConfigPath"] == str(
        base / "state" / "data" / "registry-1" / "kvConfig.json"
    )
    assert master.properties["storePathRootDir"] == str(
        base / "state" / "data" / "broker-a-0" / "store"
    )
    assert list(elsewhere.iterdir()) == []  # checking a spec creates nothing


def test_dirs_default_to_data_and_logs_beside_the_spec(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(ONE_REGISTRY, encoding="utf-8")
    spec = load_spec(path)
    assert spec.data_dir == tmp_path.resolve() / "data"
    assert spec.log_dir == tmp_path.resolve() / "logs"


def test_absolute_dirs_are_kept(tmp_path: Path) -> None:
    spec = parse(f'dataDir = "{tmp_path / "d"}"\nlogDir = "{tmp_path / "l"}"\n' + ONE_REGISTRY)
    assert spec.data_dir == tmp_path / "d"
    assert spec.registries[0].log_file == tmp_path / "l" / "registry-1.log"


def test_text_without_a_file_starts_from_base_dir(tmp_path: Path) -> None:
    spec = parse_spec(ONE_REGISTRY, base_dir=tmp_path)
    assert spec.path is None
    assert spec.data_dir == tmp_path.resolve() / "data"


# -- refusals: the document and its keys --------------------------------------------------------


def test_not_toml_is_refused() -> None:
    message = refusal("dataDir = \n")
    assert message.startswith("cluster.toml: not valid TOML: ")
    assert "line 1" in message


def test_unknown_top_level_key_is_refused() -> None:
    assert refusal("nodes = 3\n" + ONE_REGISTRY) == "cluster.toml: nodes: unknown key"


def test_unknown_top_level_key_gets_a_hint() -> None:
    assert refusal('datadir = "d"\n' + ONE_REGISTRY) == (
        "cluster.toml: datadir: unknown key (did you mean dataDir?)"
    )


def test_unknown_registry_key_is_refused_with_a_hint() -> None:
    assert refusal("[[registry]]\nlistenport = 9876\n") == (
        "cluster.toml: registry[1].listenport: unknown key (did you mean listenPort?)"
    )


def test_unknown_key_in_the_second_registry_names_it() -> None:
    assert refusal(ONE_REGISTRY + "[[registry]]\nlistenPort = 9886\nbrokerIP1 = 'x'\n") == (
        "cluster.toml: registry[2].brokerIP1: unknown key"
    )


def test_unknown_broker_key_is_refused_with_a_hint() -> None:
    assert refusal(ONE_REGISTRY + broker("brokerId = 0\nlistenport = 10911")) == (
        "cluster.toml: broker.broker-a.node[1].listenport: unknown key (did you mean listenPort?)"
    )


def test_unknown_key_in_a_later_group_names_its_group_and_node() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911") + broker("listenPort = 10931", "broker-b")
    text += broker("brokerId = 1\nbrokerRole = 'SLAVE'\nlistenPort = 10941\nhaport = 1", "broker-b")
    assert refusal(text) == "cluster.toml: broker.broker-b.node[2].haport: unknown key"


def test_unknown_defaults_key_is_refused() -> None:
    assert refusal("[defaults]\nflushDisk = 'SYNC_FLUSH'\n" + ONE_REGISTRY) == (
        "cluster.toml: defaults.flushDisk: unknown key (did you mean flushDiskType?)"
    )


def test_registry_only_key_in_defaults_is_refused() -> None:
    assert refusal("[defaults]\nkvConfigPath = 'kv.json'\n" + ONE_REGISTRY).startswith(
        "cluster.toml: defaults.kvConfigPath: unknown key"
    )


@pytest.mark.parametrize("key", ["namesrvAddr", "brokerName"])
def test_keys_the_launcher_sets_are_refused_in_a_broker(key: str) -> None:
    assert refusal(ONE_REGISTRY + broker(f"{key} = 'x'")) == (
        f"cluster.toml: broker.broker-a.node[1].{key}: is set by the launcher, not in the spec"
    )


def test_a_node_may_set_its_own_paths_relative_to_the_spec(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        "[[registry]]\nkvConfigPath = 'kv/namesrv.json'\n"
        + broker("storePathRootDir = 'stores/a'\nlistenPort = 10911")
    )
    spec = load_spec(path)
    assert spec.node("registry-1").properties["kvConfigPath"] == str(tmp_path / "kv/namesrv.json")
    assert spec.node("broker-a-0").properties["storePathRootDir"] == str(tmp_path / "stores/a")


def test_one_store_for_two_brokers_is_refused() -> None:
    text = ONE_REGISTRY + broker("storePathRootDir = '/srv/s'\nlistenPort = 10911")
    text += broker("storePathRootDir = '/srv/s'\nlistenPort = 10921", "broker-b")
    assert refusal(text) == (
        "cluster.toml: broker.broker-b.node[1].storePathRootDir: /srv/s is "
        "broker.broker-a.node[1]'s already"
    )


def test_a_store_in_the_defaults_is_refused() -> None:
    assert refusal("[defaults]\nstorePathRootDir = 's'\n" + ONE_REGISTRY) == (
        "cluster.toml: defaults.storePathRootDir: would give every broker one store; set it per "
        "node"
    )


def test_in_process_is_taken_for_in_process() -> None:
    spec = parse(ONE_REGISTRY + broker("in_process = true\nlistenPort = 10911"))
    assert spec.node("broker-a-0").in_process and not spec.node("registry-1").in_process


def test_unknown_key_in_a_group_table_is_refused() -> None:
    text = ONE_REGISTRY + "[broker.broker-a]\nbrokerId = 0\n" + broker("listenPort = 10911")
    assert refusal(text) == "cluster.toml: broker.broker-a.brokerId: unknown key"


def test_registry_must_be_an_array_of_tables() -> None:
    assert refusal("[registry]\nlistenPort = 9876\n") == (
        "cluster.toml: registry: must be an array of tables ([[registry]])"
    )


def test_broker_must_be_a_table() -> None:
    assert refusal(ONE_REGISTRY + "[[broker]]\n") == (
        "cluster.toml: broker: must be a table, not list"
    )


def test_a_group_without_nodes_is_refused() -> None:
    assert refusal(ONE_REGISTRY + "[broker.broker-a]\n") == (
        "cluster.toml: broker.broker-a.node: a broker group needs at least one [[...node]]"
    )


def test_in_process_must_be_a_boolean() -> None:
    assert refusal('inProcess = "yes"\n' + ONE_REGISTRY) == (
        "cluster.toml: inProcess: must be true or false, not 'yes'"
    )
    assert refusal("[[registry]]\ninProcess = 1\n") == (
        "cluster.toml: registry[1].inProcess: must be true or false, not 1"
    )


def test_data_dir_must_be_a_path() -> None:
    assert refusal("dataDir = 3\n" + ONE_REGISTRY) == (
        "cluster.toml: dataDir: must be a directory path, not 3"
    )
    assert refusal('logDir = ""\n' + ONE_REGISTRY) == (
        "cluster.toml: logDir: must be a directory path, not ''"
    )


# -- refusals: values ---------------------------------------------------------------------------


def test_bad_broker_role_is_refused() -> None:
    message = refusal(ONE_REGISTRY + broker('brokerRole = "BOSS"'))
    assert message.startswith("cluster.toml: broker.broker-a.node[1]: ")
    assert "brokerRole='BOSS': expected one of ASYNC_MASTER, SYNC_MASTER, SLAVE" in message


def test_broker_port_out_of_range_is_refused() -> None:
    message = refusal(ONE_REGISTRY + broker("listenPort = 70000"))
    assert message.startswith("cluster.toml: broker.broker-a.node[1]: ")
    assert "listenPort must be <= 65535: 70000" in message


def test_registry_port_out_of_range_is_refused() -> None:
    message = refusal("[[registry]]\nlistenPort = 70000\n")
    assert message.startswith("cluster.toml: registry[1]: ")
    assert "listenPort must be <= 65535: 70000" in message


def test_value_that_is_not_a_number_is_refused() -> None:
    message = refusal(ONE_REGISTRY + broker('listenPort = "ten"'))
    assert message.startswith("cluster.toml: broker.broker-a.node[1]: ")
    assert "listenPort='ten': expected an integer" in message


def test_bad_value_in_defaults_is_refused_in_the_defaults() -> None:
    message = refusal("[defaults]\nfastPortEnable = 'maybe'\n" + ONE_REGISTRY)
    assert message.startswith("cluster.toml: defaults: ")
    assert "fastPortEnable='maybe': expected true or false" in message


def test_a_table_as_a_value_is_refused() -> None:
    assert refusal(ONE_REGISTRY + broker("listenPort = [10911]")) == (
        "cluster.toml: broker.broker-a.node[1].listenPort: must be a string, number or boolean, "
        "not [10911]"
    )


def test_a_broker_group_name_outside_rocketmq_s_characters_is_refused() -> None:
    text = ONE_REGISTRY + "[[broker.'../x'.node]]\nlistenPort = 10911\n"
    assert refusal(text) == (
        "cluster.toml: broker.../x: a broker group's name (its brokerName) is letters, digits, "
        "- and _"
    )


def test_a_spec_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_bytes(b"[[registry]]\nlistenPort = 9876 # \xff\n")
    with pytest.raises(SpecError, match="the cluster spec is not UTF-8 text"):
        load_spec(path)


# -- refusals: ports ----------------------------------------------------------------------------


def test_two_registries_on_one_port_are_refused() -> None:
    assert refusal(ONE_REGISTRY + ONE_REGISTRY) == (
        "cluster.toml: registry[2].listenPort: port 9876 is registry[1].listenPort already"
    )


def test_two_brokers_on_one_listen_port_are_refused() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911\nhaListenPort = 10950")
    text += broker("listenPort = 10911\nhaListenPort = 10960", "broker-b")
    assert refusal(text) == (
        "cluster.toml: broker.broker-b.node[1].listenPort: "
        "port 10911 is broker.broker-a.node[1].listenPort already"
    )


def test_a_broker_on_a_registrys_port_is_refused() -> None:
    assert refusal(ONE_REGISTRY + broker("listenPort = 9876")) == (
        "cluster.toml: broker.broker-a.node[1].listenPort: "
        "port 9876 is registry[1].listenPort already"
    )


def test_the_fast_port_clashing_with_another_node_is_refused() -> None:
    assert refusal("[[registry]]\nlistenPort = 10909\n" + broker("listenPort = 10911")) == (
        "cluster.toml: broker.broker-a.node[1].listenPort - 2 (the fast port): "
        "port 10909 is registry[1].listenPort already"
    )


def test_the_fast_port_clashing_with_another_broker_is_refused() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911") + broker("listenPort = 10913", "broker-b")
    assert refusal(text) == (
        "cluster.toml: broker.broker-b.node[1].listenPort - 2 (the fast port): "
        "port 10911 is broker.broker-a.node[1].listenPort already"
    )


def test_without_the_fast_port_listen_port_minus_two_is_free() -> None:
    text = "[[registry]]\nlistenPort = 10909\n"
    spec = parse(text + broker("listenPort = 10911\nfastPortEnable = false"))
    assert spec.names() == ["registry-1", "broker-a-0"]


def test_fast_port_enable_from_defaults_counts() -> None:
    text = "[defaults]\nfastPortEnable = false\n[[registry]]\nlistenPort = 10909\n"
    assert parse(text + broker("listenPort = 10911")).node("broker-a-0").port == 10911


def test_an_ha_port_clashing_with_a_registry_is_refused() -> None:
    assert refusal("[[registry]]\nlistenPort = 10912\n" + broker("listenPort = 10911")) == (
        "cluster.toml: broker.broker-a.node[1].haListenPort: "
        "port 10912 is registry[1].listenPort already"
    )


def test_two_explicit_ha_ports_clashing_are_refused() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911\nhaListenPort = 10950")
    text += broker("listenPort = 10931\nhaListenPort = 10950", "broker-b")
    assert refusal(text) == (
        "cluster.toml: broker.broker-b.node[1].haListenPort: "
        "port 10950 is broker.broker-a.node[1].haListenPort already"
    )


def test_a_websocket_port_clashing_is_refused() -> None:
    assert refusal("[[registry]]\nlistenPort = 9876\nwebsocketListenPort = 9876\n") == (
        "cluster.toml: registry[1].websocketListenPort: port 9876 is registry[1].listenPort already"
    )


def test_websocket_port_zero_is_off_and_claims_nothing() -> None:
    spec = parse("[[registry]]\nwebsocketListenPort = 0\n[[registry]]\nwebsocketListenPort = 0\n")
    assert spec.names() == ["registry-1", "registry-2"]


def test_registry_listen_port_zero_is_refused() -> None:
    assert refusal("[[registry]]\nlistenPort = 0\n") == (
        "cluster.toml: registry[1].listenPort: needs a fixed port (0 would pick one at random)"
    )


def test_broker_listen_port_zero_is_refused() -> None:
    assert refusal(ONE_REGISTRY + broker("listenPort = 0")) == (
        "cluster.toml: broker.broker-a.node[1].listenPort: "
        "needs a fixed port (0 would pick one at random)"
    )


# -- refusals: broker groups --------------------------------------------------------------------


def test_a_slave_without_a_master_is_refused() -> None:
    assert refusal(ONE_REGISTRY + broker('brokerId = 1\nbrokerRole = "SLAVE"')) == (
        "cluster.toml: broker.broker-a.node: broker group broker-a has slaves but no master "
        "(brokerId 0)"
    )


def test_two_masters_in_one_group_are_refused() -> None:
    text = ONE_REGISTRY + broker('brokerId = 0\nbrokerRole = "SYNC_MASTER"\nlistenPort = 10911')
    text += broker('brokerId = 0\nbrokerRole = "ASYNC_MASTER"\nlistenPort = 10921')
    message = refusal(text)
    assert message == (
        "cluster.toml: broker.broker-a.node[2].brokerId: a group has one master (brokerId 0), "
        "and broker.broker-a.node[1] is it already"
    )


def test_masters_of_different_groups_are_fine() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911") + broker("listenPort = 10921", "broker-b")
    assert parse(text).names() == ["registry-1", "broker-a-0", "broker-b-0"]


def test_a_duplicate_broker_id_is_refused() -> None:
    text = ONE_REGISTRY + broker("brokerId = 0\nlistenPort = 10911")
    text += broker('brokerId = 1\nbrokerRole = "SLAVE"\nlistenPort = 10921')
    text += broker('brokerId = 1\nbrokerRole = "SLAVE"\nlistenPort = 10931')
    assert refusal(text) == (
        "cluster.toml: broker.broker-a.node[3].brokerId: brokerId 1 is broker.broker-a.node[2]'s "
        "already"
    )


def test_a_slave_with_broker_id_zero_is_refused() -> None:
    assert refusal(ONE_REGISTRY + broker('brokerId = 0\nbrokerRole = "SLAVE"')) == (
        "cluster.toml: broker.broker-a.node[1].brokerId: a SLAVE needs a brokerId above 0"
    )


def test_a_master_with_broker_id_two_is_refused() -> None:
    message = refusal(ONE_REGISTRY + broker('brokerId = 2\nbrokerRole = "SYNC_MASTER"'))
    assert message.startswith("cluster.toml: broker.broker-a.node[1].brokerId: ")
    assert "a master (SYNC_MASTER) has brokerId 0 (RocketMQ's master id), not 2" in message


def test_a_negative_broker_id_is_refused() -> None:
    message = refusal(ONE_REGISTRY + broker("brokerId = -1"))
    assert message.startswith("cluster.toml: broker.broker-a.node[1]: ")
    assert "must be >= 0: -1" in message


def test_slaves_start_after_every_master() -> None:
    text = ONE_REGISTRY + broker("listenPort = 10911")
    text += broker('brokerId = 2\nbrokerRole = "SLAVE"\nlistenPort = 10921')
    text += broker('brokerId = 1\nbrokerRole = "SLAVE"\nlistenPort = 10931')
    text += broker("listenPort = 10941", "broker-b")
    spec = parse(text)
    assert spec.names() == ["registry-1", "broker-a-0", "broker-b-0", "broker-a-2", "broker-a-1"]
    assert [node.rank for node in spec.brokers] == [1, 1, 2, 2]


# -- refusals: the cluster and the file ---------------------------------------------------------


def test_no_registry_is_refused() -> None:
    expected = "cluster.toml: registry: the cluster needs at least one [[registry]]"
    assert refusal(broker("listenPort = 10911")) == expected
    assert refusal("") == expected
    assert refusal("registry = []\n") == expected


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(SpecError) as caught:
        load_spec(missing)
    assert str(caught.value) == (
        f"{missing}: cannot read the cluster spec: No such file or directory"
    )


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot read the cluster spec: Is a directory"


def test_a_refusal_from_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "prod.toml"
    path.write_text("[[registry]]\nlistenport = 9876\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: registry[1].listenport: unknown key (did you mean listenPort?)"
    )
    assert sorted(tmp_path.iterdir()) == [path]  # no data or log directory was made


def test_text_without_a_file_is_named_spec() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("bogus = 1\n")
    assert str(caught.value) == "<spec>: bogus: unknown key"


def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)


def test_cluster_command_refuses_a_bad_spec_with_nothing_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(ONE_REGISTRY + broker('brokerRole = "BOSS"'), encoding="utf-8")
    args = argparse.Namespace(file=str(path), status=False, follow=False)
    code = run_spec(argparse.ArgumentParser(prog="boltmq cluster"), args)
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"boltmq cluster: {path}: broker.broker-a.node[1]: ")
    assert err.endswith("; nothing started\n")
    assert sorted(tmp_path.iterdir()) == [path]


def test_node_spec_is_frozen(tmp_path: Path) -> None:
    node: NodeSpec = example(tmp_path).nodes[0]
    with pytest.raises(AttributeError):
        node.port = 1  # type: ignore[misc]


def test_nodes_listen_on_loopback_unless_the_spec_says_otherwise() -> None:
    spec = parse(ONE_REGISTRY + broker("listenPort = 10911"))
    for node in spec.nodes:
        assert node.bind_address == "127.0.0.1"
        assert node.properties["bindAddress"] == "127.0.0.1"  # what the node is started with
    opened = parse(
        "[defaults]\nbindAddress = '0.0.0.0'\n"
        "[[registry]]\nlistenPort = 9876\nbindAddress = '0.0.0.0'\n"
        + broker("listenPort = 10911")
        + broker("listenPort = 10921\nbindAddress = '10.1.2.3'", "broker-b")
    )
    assert [node.bind_address for node in opened.nodes] == ["0.0.0.0", "0.0.0.0", "10.1.2.3"]
