"""The ACL rules without a server: the signature, plain_acl.yml parsing, white addresses, perms.

The signature vector was worked out by hand from RocketMQ's algorithm and computed with
OpenSSL (``printf 'RocketMQxThello' | openssl dgst -sha1 -hmac 12345678 -binary | base64``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from actors.acl import (
    AclConfigError,
    AclDeniedError,
    AclTable,
    Perm,
    check_request,
    compile_address_pattern,
    load_plain_acl,
    parse_plain_acl,
    required_perms,
)
from protocol import RemotingCommand, RequestCode, names
from protocol.acl import SessionCredentials, calculate_signature, request_content
from protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData

SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def table_of(text: str = SAMPLE) -> AclTable:
    return parse_plain_acl(yaml.safe_load(text))


def test_signature_known_vector() -> None:
    # Values sorted by key (AccessKey, b, topic) then the body; Signature itself is left out.
    fields = {"topic": "T", "b": "x", "AccessKey": "RocketMQ", "Signature": "ignored"}
    content = request_content(fields, b"hello")
    assert content == b"RocketMQxThello"
    assert calculate_signature(content, "12345678") == "F5OXz6yI9UXc4zQMvVBcpXF4d1k="
    # AccessKey alone (a request with no other field and no body):
    assert calculate_signature(b"RocketMQ", "12345678") == "IUc8rrO/0gDch8CjObLQsW2rsiA="


def test_sign_adds_fields_and_the_server_accepts_it() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "topicB", "a": "PG"}, b"x")
    SessionCredentials("RocketMQ", "12345678").sign(request)
    assert request.ext_fields is not None
    assert request.ext_fields["AccessKey"] == "RocketMQ"
    expected = calculate_signature(b"RocketMQPGtopicBx", "12345678")  # "A" < "a" < "b"
    assert request.ext_fields["Signature"] == expected
    check_request(table_of(), request, "127.0.0.1")  # allowed: PUB on topicB
    request.ext_fields["b"] = "topicC"  # changed after signing
    with pytest.raises(AclDeniedError, match="Check signature failed for accessKey=RocketMQ"):
        check_request(table_of(), request, "127.0.0.1")


def test_security_token_is_signed() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "topicC"})
    SessionCredentials("RocketMQ", "12345678", "token-1").sign(request)
    assert request.ext_fields is not None
    assert request.ext_fields["SecurityToken"] == "token-1"
    assert request.ext_fields["Signature"] == calculate_signature(
        b"RocketMQtoken-1topicC", "12345678"
    )


def test_credentials_options() -> None:
    assert SessionCredentials.from_options(None, None) is None
    with pytest.raises(ValueError, match="the secret key is missing"):
        SessionCredentials.from_options("RocketMQ", None)


def signed(code: int, fields: dict[str, str], body: bytes | None = None) -> RemotingCommand:
    request = RemotingCommand.request(code, dict(fields), body)
    SessionCredentials("RocketMQ", "12345678").sign(request)
    return request


@pytest.mark.parametrize(
    ("request_", "remark"),
    [
        (RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "topicB"}), "No accessKey"),
        (
            RemotingCommand.request(
                RequestCode.SEND_MESSAGE, {"topic": "topicB", "AccessKey": "", "Signature": ""}
            ),
            "No accessKey",
        ),
        (
            RemotingCommand.request(
                RequestCode.SEND_MESSAGE, {"topic": "topicB", "AccessKey": "nobody12"}
            ),
            "No acl config for nobody12",
        ),
        (
            signed(RequestCode.SEND_MESSAGE, {"topic": "topicA"}),
            "No PUB permission for topic topicA",
        ),
        (
            signed(RequestCode.SEND_MESSAGE, {"topic": "topicC"}),
            "No PUB permission for topic topicC",
        ),
        (signed(RequestCode.SEND_MESSAGE, {"topic": "other"}), "No PUB permission for topic other"),
        (
            signed(RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}),
            "No SUB permission for group groupA",
        ),
        (
            signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "topicB"}),
            "Need admin permission for request code=17",
        ),
    ],
)
def test_refusals_name_what_is_missing(request_: RemotingCommand, remark: str) -> None:
    with pytest.raises(AclDeniedError, match=remark):
        check_request(table_of(), request_, "127.0.0.1")


def test_allowed_requests() -> None:
    table = table_of()
    check_request(
        table,
        signed(RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupC"}),
        "127.0.0.1",
    )
    # The retry topic of a group is checked as the group (default SUB here).
    check_request(
        table,
        signed(
            RequestCode.PULL_MESSAGE,
            {"topic": names.retry_topic("groupX"), "consumerGroup": "groupX"},
        ),
        "127.0.0.1",
    )
    # Requests that touch no topic or group need only a good signature.
    check_request(table, signed(RequestCode.GET_BROKER_RUNTIME_INFO, {}), "127.0.0.1")
    # Global white list: nothing needed at all.
    check_request(
        table, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "topicA"}), "192.168.0.7"
    )
    # An account's white address passes that account without a signature.
    unsigned_admin = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, {"AccessKey": "rocketmq2"}
    )
    check_request(table, unsigned_admin, "192.168.1.20")
    with pytest.raises(AclDeniedError, match="No signature for accessKey=rocketmq2"):
        check_request(table, unsigned_admin, "192.168.2.20")
    # An admin with no per-resource perms reaches every topic.
    admin = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "topicA"})
    SessionCredentials("rocketmq2", "12345678").sign(admin)
    check_request(table, admin, "127.0.0.1")


def test_heartbeat_needs_sub_on_groups_and_topics() -> None:
    body = HeartbeatData(
        client_id="c1",
        consumer_data_set=[
            ConsumerData(
                group_name="groupC", subscription_data_set=[SubscriptionData(topic="topicA")]
            )
        ],
    ).to_json()
    request = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
    assert required_perms(request) == {names.retry_topic("groupC"): Perm.SUB, "topicA": Perm.SUB}
    with pytest.raises(AclDeniedError, match="No SUB permission for topic topicA"):
        check_request(table_of(), signed(RequestCode.HEART_BEAT, {}, body), "127.0.0.1")


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("192.168.0.*", ["192.168.0.1", "192.168.0.255"], ["192.168.1.1", "10.0.0.1"]),
        ("192.168.*.*", ["192.168.7.1"], ["192.169.0.1"]),
        ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.2.50"]),
        ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
        ("127.0.0.1,10.0.0.2", ["127.0.0.1", "10.0.0.2"], ["10.0.0.3"]),
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ],
)
def test_white_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    match = compile_address_pattern(pattern)
    assert all(match(host) for host in inside)
    assert not any(match(host) for host in outside)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("accounts: [{accessKey: short, secretKey: 12345678}]", "at least 7 characters"),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: 12345678, defaultTopicPerm: ALL}]",
            "'ALL' is not a permission",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: 12345678, topicPerms: [topicA]}]",
            "is not name=PERM",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: 12345678, whiteRemoteAddress: 300.1.1.*}]",
            "must be 0-255",
        ),
        ("globalWhiteRemoteAddresses: [192.168.1.5-2]", "a range is low-high"),
        ("accounts: {accessKey: RocketMQ}", "'accounts' must be a list"),
        ("- just a list", "expected a mapping"),
    ],
)
def test_bad_files_are_refused_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(AclConfigError, match=error):
        table_of(text)


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    with pytest.raises(AclConfigError, match="does not exist"):
        load_plain_acl(path)
    path.write_text("accounts: [\n")
    with pytest.raises(AclConfigError, match=f"{path}: not valid YAML"):
        load_plain_acl(path)
    path.write_text(SAMPLE)
    assert sorted(load_plain_acl(path).accounts) == ["RocketMQ", "rocketmq2"]
