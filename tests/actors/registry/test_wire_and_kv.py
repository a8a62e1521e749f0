"""RegisterBrokerBody codecs, config keys and kvConfig.json persistence (real files)."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import attrs
import orjson
import pytest

from actors.registry.config import KEYS, RUNTIME_KEYS, ConfigError, RegistryConfig
from actors.registry.kv_config import KVConfig, KVConfigError
from actors.registry.wire import (
    BodyError,
    DataVersion,
    TopicConfig,
    body_crc32,
    decode_register_body,
    encode_register_body,
)
from protocol import names


@pytest.mark.parametrize("compressed", [False, True])
def test_register_body_round_trip(compressed: bool) -> None:
    topics = [
        TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=2, perm=6),
        TopicConfig(
            topic_name=names.retry_topic("g"), read_queue_nums=1, write_queue_nums=1, perm=7
        ),
    ]
    version = DataVersion(timestamp=1700000000000, counter=9)
    body = encode_register_body(version, topics, ["10.0.0.9:1"], compressed=compressed)
    decoded = decode_register_body(body, compressed)
    wrapper = decoded.topic_config_serialize_wrapper
    assert wrapper.data_version == version
    assert wrapper.topic_config_table == {t.topic_name: t for t in topics}
    assert decoded.filter_server_list == ["10.0.0.9:1"]


def test_no_body_means_version_zero_and_no_topics() -> None:
    decoded = decode_register_body(None, compressed=False)
    wrapper = decoded.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(timestamp=0, counter=0)
    assert wrapper.topic_config_table == {}


def test_crc_is_masked_to_31_bits() -> None:
    data = b"\xff" * 7
    assert body_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert body_crc32(data) < 2**31


@pytest.mark.parametrize(
    "body",
    [b"[1]", b"\x00", b'{"topicConfigSerializeWrapper":{"topicConfigTable":[1]}}'],
)
def test_bad_plain_bodies_raise_body_error(body: bytes) -> None:
    with pytest.raises(BodyError):
        decode_register_body(body, compressed=False)


def test_config_update_is_all_or_nothing() -> None:
    config = RegistryConfig()
    with pytest.raises(ConfigError):
        config.update({"orderMessageEnable": "true", "brokerExpiredMillis": "-1"}, runtime=True)
    assert config.order_message_enable is False and config.broker_expired_millis == 120_000
    assert config.update({"kvConfigPath": ""}) == ["kvConfigPath"]
    assert config.kv_config_path is None
    assert config.to_properties()["kvConfigPath"] == ""


def test_every_config_key_maps_to_its_field_and_back() -> None:
    config = RegistryConfig()
    properties = config.to_properties()
    assert set(KEYS) == set(properties)
    assert set(KEYS.values()) == {field.name for field in attrs.fields(RegistryConfig)}
    assert RUNTIME_KEYS.issubset(KEYS)
    # A key's spelling is RocketMQ's NameServer's, so an existing namesrv.properties loads.
    assert KEYS["listenPort"] == "listen_port"
    assert KEYS["serverChannelMaxIdleTimeSeconds"] == "server_channel_max_idle_time_seconds"
    for key, attribute in KEYS.items():
        value = properties[key]
        assert RegistryConfig.from_properties({key: value}).to_properties()[key] == value
        assert config.update({key: value}) == [key]
        assert properties == config.to_properties(), attribute


def test_kv_file_round_trip_and_java_shape(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kvConfig.json"
    kv = KVConfig(path)
    kv.load()  # missing file: empty
    kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:8")
    kv.save()
    kv.put("NS", "k", "v")
    kv.save()
    assert orjson.loads(path.read_bytes()) == {
        "configTable": {"NS": {"k": "v"}, "ORDER_TOPIC_CONFIG": {"T": "broker-a:8"}}
    }
    # The previous version is kept as .bak; no .tmp is left behind.
    assert orjson.loads((tmp_path / "sub" / "kvConfig.json.bak").read_bytes()) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:8"}}
    }
    assert not (tmp_path / "sub" / "kvConfig.json.tmp").exists()
    again = KVConfig(path)
    again.load()
    assert again.config_table == kv.config_table


def test_corrupt_file_falls_back_to_bak_and_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("NS", "k", "v")
    kv.save()
    kv.save()  # .bak now holds a good copy
    path.write_bytes(b"\x00garbage")
    loaded = KVConfig(path)
    with caplog.at_level(logging.WARNING):
        loaded.load()
    assert loaded.config_table == {"NS": {"k": "v"}}
    assert "kvConfig.json.bak" in caplog.text
    assert path.read_bytes() == b"\x00garbage"


def test_corrupt_file_and_corrupt_bak_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_bytes(b'{"configTable": {"NS": {"k": 1}}}')
    (tmp_path / "kvConfig.json.bak").write_bytes(b"nope")
    with pytest.raises(KVConfigError, match=r"kvConfig\.json: namespace 'NS'"):
        KVConfig(path).load()
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(KVConfigError, match=r"kvConfig\.json"):
        KVConfig(path).load()
