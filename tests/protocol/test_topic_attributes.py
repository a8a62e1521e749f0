"""RocketMQ 5's topic attributes: the change string, the rules of a change, and the topic
config's JSON and compressed-registration forms with and without them."""

from __future__ import annotations

import pytest

from protocol.bodies import (
    RegisterBrokerBody,
    TopicAttributeError,
    TopicConfig,
    TopicConfigSerializeWrapper,
    alter_attributes,
    format_attribute_changes,
    parse_attribute_changes,
)


def test_change_strings_parse_and_format() -> None:
    changes = parse_attribute_changes("+message.type=FIFO,-old")
    assert changes == {"+message.type": "FIFO", "-old": ""}
    assert format_attribute_changes(changes) == "+message.type=FIFO,-old"
    assert parse_attribute_changes("") == {} == parse_attribute_changes(None)
    for bad in ("message.type=FIFO", "+message.type", "+=x", "+a=1,+a=2", "-"):
        with pytest.raises(TopicAttributeError):
            parse_attribute_changes(bad)


def test_alter_follows_rocketmq_5_rules() -> None:
    fifo = {"message.type": "FIFO"}
    assert alter_attributes({}, {"+message.type": "FIFO"}, create=True) == fifo
    assert alter_attributes(fifo, {"+message.type": "DELAY"}, create=False) == {
        "message.type": "DELAY"
    }
    assert alter_attributes(fifo, {"-message.type": ""}, create=False) == {}
    assert alter_attributes(fifo, {}, create=False) == fifo
    refusals = [
        ({}, {"-message.type": ""}, True, r"only \+key=value"),
        ({}, {"-message.type": ""}, False, "not set"),
        ({}, {"+message.type": "fifo"}, True, "is one of"),
        ({}, {"+retention": "1d"}, True, "unsupported topic attribute"),
    ]
    for current, changes, create, words in refusals:
        with pytest.raises(TopicAttributeError, match=words):
            alter_attributes(current, changes, create=create)
    assert fifo == {"message.type": "FIFO"}  # the current map is never changed in place


def test_json_leaves_empty_attributes_out_and_reads_rocketmq_5s_form() -> None:
    plain = TopicConfig(topic_name="T")
    assert b"attributes" not in plain.to_json()
    fifo = TopicConfig(topic_name="T", attributes={"message.type": "FIFO"})
    assert b'"attributes":{"message.type":"FIFO"}' in fifo.to_json()
    assert TopicConfig.from_json(fifo.to_json()) == fifo
    assert TopicConfig.from_json(b'{"topicName":"T","attributes":{}}') == plain
    assert fifo.message_type == "FIFO" and plain.message_type == "NORMAL"


def test_compressed_registration_carries_attributes_as_a_sixth_field() -> None:
    table = {
        "F": TopicConfig(topic_name="F", attributes={"message.type": "FIFO"}),
        "N": TopicConfig(topic_name="N"),
    }
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(topic_config_table=table)
    )
    back = RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True)
    decoded = back.topic_config_serialize_wrapper.topic_config_table
    assert decoded["F"].attributes == {"message.type": "FIFO"}
    assert decoded["N"].attributes == {}
