"""Properties files and typed config classes: real files in tmp_path, Java's syntax rules."""

from __future__ import annotations

import enum
import logging
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisors.config import (
    ConfigError,
    build_config,
    config_properties,
    format_properties,
    load_config,
    load_properties,
    parse_overrides,
    parse_properties,
    property_key,
    update_properties_text,
)

BROKER_CONF = """\
# broker.conf as RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
"""


def test_a_rocketmq_broker_conf() -> None:
    assert parse_properties(BROKER_CONF) == {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "deleteWhen": "04",
        "fileReservedTime": "48",
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("  a  =  b  ", {"a": "b"}),
        ("a\t:\tb", {"a": "b"}),
        ("a = = b", {"a": "= b"}),
        ("a b=c", {"a": "b=c"}),
        ("a=", {"a": ""}),
        ("a", {"a": ""}),
        ("# a=b\n! c=d\n   # e=f\n\n   \n", {}),
        ("a=b # not a comment", {"a": "b # not a comment"}),
        ("a=1\na=2", {"a": "2"}),
        ("a=b\\\n    c\\\n  d", {"a": "bcd"}),
        ("a=b\\\n# not a comment", {"a": "b# not a comment"}),
        ("a=b\\\\\nc=d", {"a": "b\\", "c": "d"}),
        ("a=b\\", {"a": "b"}),
        ("a=one\r\nb=two\rc=three\n", {"a": "one", "b": "two", "c": "three"}),
        ("key\\ with\\=odd\\:chars=v", {"key with=odd:chars": "v"}),
        ("a=\\ padded\\ ", {"a": " padded "}),
        ("a=tab\\there\\nnewline", {"a": "tab\there\nnewline"}),
        ("a=\\u00e9t\\u00E9", {"a": "été"}),
        ("a=\\q\\#", {"a": "q#"}),
        ("\\#a=b", {"#a": "b"}),
        ("a=C:\\\\data\\\\store", {"a": "C:\\data\\store"}),
        ("a=x\x0by", {"a": "x\x0by"}),  # only \n and \r break lines, as in Java
    ],
)
def test_properties_syntax(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_malformed_unicode_escape_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"broker\.conf:3: malformed \\uxxxx"):
        parse_properties("a=1\n\nb=\\u12x4\n", source="broker.conf")


def test_load_properties_reads_utf8_and_latin1(tmp_path: Path) -> None:
    utf8 = tmp_path / "utf8.conf"
    utf8.write_text("brokerName=brøker\n", encoding="utf-8")
    latin1 = tmp_path / "latin1.conf"
    latin1.write_bytes("brokerName=brøker\n".encode("iso-8859-1"))
    assert load_properties(utf8) == {"brokerName": "brøker"}
    assert load_properties(latin1) == {"brokerName": "brøker"}


@settings(max_examples=200)
@given(st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=8))
def test_format_then_parse_round_trips(values: dict[str, str]) -> None:
    assert parse_properties(format_properties(values)) == values


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@attrs.define
class SampleConfig:
    listen_port: int = 10911
    broker_name: str = "broker-a"
    broker_ip1: str = "127.0.0.1"
    auto_create_topic_enable: bool = True
    disk_max_used_space_ratio: float = 75.0
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    store_path_root_dir: Path = Path("/tmp/store")
    namesrv_addr: str | None = None
    ha_listen_port: int = attrs.field(default=10912, metadata={"key": "haListenPort"})


def test_defaults_then_file_then_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "listenPort=10921\nbrokerName = broker-b\nbrokerIP1=10.0.0.7\n"
        "autoCreateTopicEnable=FALSE\nflushDiskType=SYNC_FLUSH\n"
        "storePathRootDir=~/store\nnamesrvAddr=127.0.0.1:9876\n"
    )
    config = load_config(SampleConfig, conf, {"listen_port": "10931", "haListenPort": 10932})
    assert config == SampleConfig(
        listen_port=10931,
        broker_name="broker-b",
        broker_ip1="10.0.0.7",
        auto_create_topic_enable=False,
        disk_max_used_space_ratio=75.0,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        store_path_root_dir=Path("~/store").expanduser(),
        namesrv_addr="127.0.0.1:9876",
        ha_listen_port=10932,
    )


def test_no_file_gives_the_defaults() -> None:
    assert load_config(SampleConfig) == SampleConfig()


def test_empty_text_makes_an_optional_field_none() -> None:
    config = build_config(SampleConfig, {"namesrvAddr": "x:1"}, overrides={"namesrvAddr": ""})
    assert config.namesrv_addr is None


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("listenPort", "ten", "an integer"),
        ("listenPort", "1_000", "an integer"),
        ("listenPort", "9876.5", "an integer"),
        ("autoCreateTopicEnable", "yes", "true or false"),
        ("diskMaxUsedSpaceRatio", "lots", "a number"),
        ("flushDiskType", "FAST_FLUSH", "one of ASYNC_FLUSH, SYNC_FLUSH"),
    ],
)
def test_bad_values_name_the_key_the_value_and_the_file(
    tmp_path: Path, key: str, value: str, expected: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{key}={value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(SampleConfig, conf)
    message = str(caught.value)
    assert str(conf) in message
    assert f"{key}={value!r}" in message
    assert expected in message


def test_bad_typed_override_names_the_command_line() -> None:
    with pytest.raises(ConfigError, match=r"command line: listenPort=True: expected an integer"):
        build_config(SampleConfig, overrides={"listenPort": True})


def test_unknown_keys_warn_with_a_suggestion(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPrt=1\nbrokerName=b\n")
    with caplog.at_level(logging.WARNING, logger="boltmq.config"):
        config = load_config(SampleConfig, conf)
    assert config.broker_name == "b"
    assert f"{conf}: unknown key 'listenPrt' ignored (did you mean 'listenPort'?)" in (
        caplog.messages
    )


def test_key_names_and_printing() -> None:
    fields = {field.name: field for field in attrs.fields(SampleConfig)}
    assert property_key(fields["listen_port"]) == "listenPort"
    assert property_key(fields["ha_listen_port"]) == "haListenPort"
    printed = config_properties(SampleConfig())
    assert printed["autoCreateTopicEnable"] == "true"
    assert printed["flushDiskType"] == "ASYNC_FLUSH"
    assert printed["namesrvAddr"] == ""
    # What is printed loads back to the same config.
    assert build_config(SampleConfig, printed) == SampleConfig()


def test_parse_overrides() -> None:
    assert parse_overrides(["listenPort=9877", " brokerName = b "]) == {
        "listenPort": "9877",
        "brokerName": "b",
    }
    with pytest.raises(ConfigError, match="'listenPort' is not key=value"):
        parse_overrides(["listenPort"])


def test_update_properties_text_changes_lines_in_place_and_keeps_the_rest() -> None:
    text = (
        "# broker-a\n"
        "brokerName = broker-a\n"
        "broker_permission: 6\n"  # another spelling of the same key
        "\n"
        "longPolling\\\n"
        "    Enable=true\n"  # one setting on two lines
        "! kept comment\n"
        "brokerPermission=2\n"  # a later duplicate would win when read: dropped
    )
    changes = {"brokerPermission": "4", "longPollingEnable": "false", "slaveReadEnable": "true"}
    updated = update_properties_text(text, changes)
    assert updated == (
        "# broker-a\n"
        "brokerName = broker-a\n"
        "brokerPermission=4\n"
        "\n"
        "longPollingEnable=false\n"
        "! kept comment\n"
        "slaveReadEnable=true\n"
    )
    assert parse_properties(updated) == {"brokerName": "broker-a", **changes}


def test_update_properties_text_escapes_values_and_handles_an_empty_file() -> None:
    updated = update_properties_text("", {"brokerIP1": " 10.0.0.1", "a=b": "x:y"})
    assert parse_properties(updated) == {"brokerIP1": " 10.0.0.1", "a=b": "x:y"}
    assert update_properties_text("k=v", {}) == "k=v\n"  # a final line break is added
