"""ACL on a live broker and registry: every refusal kind, the file reload, the project's client.

Rules: loopback only, ephemeral ports, real files in ``tmp_path``, a deadline on every wait.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
import trio

import boltmq
from actors.acl import AccessValidator, AclConfigError
from actors.registry.config import RegistryConfig
from actors.registry.service import open_registry
from client import (
    Admin,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.acl import SessionCredentials
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from tests.support import remoting
from tests.support.waiting import wait_until

ACL = """
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclTopic=PUB|SUB
      - Forbidden=DENY
    groupPerms:
      - AclGroup=SUB
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
"""

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
PRODUCER = SessionCredentials("producer1", "producer-secret")
ADMIN = SessionCredentials("adminuser", "admin-secret")


def write_acl(path: Path, text: str) -> None:
    """Replace the file the way an editor or a config tool does (new file, then rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def call(
    client: RemotingClient,
    address: str,
    code: int,
    fields: dict[str, str],
    credentials: SessionCredentials | None = None,
) -> RemotingCommand:
    body = b"hello" if code == RequestCode.SEND_MESSAGE_V2 else None
    request = RemotingCommand.request(code, dict(fields), body)
    if credentials is not None:
        credentials.sign(request)
    return await remoting.call(client, address, request)


def send_fields(topic: str) -> dict[str, str]:
    return {"a": "PG", "b": topic, "c": names.AUTO_CREATE_TOPIC_KEY_TOPIC, "d": "4", "e": "0",
            "f": "0", "g": "0", "h": "0", "i": "", "j": "0", "k": "false"}  # fmt: skip


async def test_broker_refusals_and_reload(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_acl(acl_file, ACL)
    async with (
        boltmq.embedded(
            tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
        ) as cluster,
        RemotingClient() as client,
    ):
        broker = cluster.broker_address
        send = RequestCode.SEND_MESSAGE_V2

        async def refused(answer: RemotingCommand, remark: str) -> None:
            assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
            assert answer.remark is not None and remark in answer.remark

        await refused(await call(client, broker, send, send_fields("AclTopic")), "No accessKey")
        wrong = SessionCredentials("producer1", "not-the-secret")
        answer = await call(client, broker, send, send_fields("AclTopic"), wrong)
        await refused(answer, "Check signature failed for accessKey=producer1")
        stranger = SessionCredentials("stranger", "whatever-secret")
        answer = await call(client, broker, send, send_fields("AclTopic"), stranger)
        await refused(answer, "No acl config for stranger")
        answer = await call(client, broker, send, send_fields("Forbidden"), PRODUCER)
        await refused(answer, "No PUB permission for topic Forbidden")
        pull = {"consumerGroup": "OtherGroup", "topic": "AclTopic", "queueId": "0",
                "queueOffset": "0", "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subVersion": "0"}  # fmt: skip
        answer = await call(client, broker, RequestCode.PULL_MESSAGE, pull, PRODUCER)
        await refused(answer, "No SUB permission for group OtherGroup")
        create = {"topic": "NewTopic", "defaultTopic": names.AUTO_CREATE_TOPIC_KEY_TOPIC,
                  "readQueueNums": "4", "writeQueueNums": "4", "perm": "6", "order": "false",
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0"}  # fmt: skip
        answer = await call(client, broker, RequestCode.UPDATE_AND_CREATE_TOPIC, create, PRODUCER)
        await refused(answer, "Need admin permission for request code=17")
        assert "refused SEND_MESSAGE_V2 from 127.0.0.1:" in caplog.text  # the peer is logged

        # Allowed: a signed send with PUB on the topic, an admin's topic creation.
        answer = await call(client, broker, send, send_fields("AclTopic"), PRODUCER)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        answer = await call(client, broker, RequestCode.UPDATE_AND_CREATE_TOPIC, create, ADMIN)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        # Reload: loopback becomes producer1's white address (no signature needed then).
        validator = cluster.broker.acl
        assert isinstance(validator, AccessValidator)
        loads = validator.statistics().loads
        unsigned = {**send_fields("AclTopic"), "AccessKey": "producer1"}
        await refused(await call(client, broker, send, unsigned), "No signature")
        write_acl(acl_file, ACL.replace("    secretKey: producer-secret\n",
                                        "    secretKey: producer-secret\n"
                                        "    whiteRemoteAddress: 127.0.0.*\n"))  # fmt: skip
        await wait_until(lambda: validator.statistics().loads > loads, 20, "the edited file loaded")
        answer = await call(client, broker, send, unsigned)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        # A bad file keeps the accounts in force and says why, once.
        write_acl(acl_file, "accounts: [{accessKey: x}]\n")
        await wait_until(
            lambda: validator.statistics().failed_reloads == 1, 20, "the bad file seen"
        )
        assert "accessKey and secretKey need at least 7 characters" in caplog.text
        answer = await call(client, broker, send, unsigned)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        # Global white list: anything from loopback passes, even unsigned admin requests.
        write_acl(acl_file, ACL + "globalWhiteRemoteAddresses: [127.0.0.1]\n")
        await wait_until(
            lambda: validator.statistics().loads > loads + 1, 20, "the white list loaded"
        )
        answer = await call(client, broker, RequestCode.UPDATE_AND_CREATE_TOPIC, create)
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_project_client_with_credentials(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_acl(acl_file, ACL)
    async with boltmq.embedded(
        tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
    ) as cluster:
        namesrv = cluster.registry_address
        keys = {"access_key": "producer1", "secret_key": "producer-secret"}
        async with Producer("PG", namesrv_addr=namesrv, **keys) as producer:
            for i in range(4):
                await producer.send(Message("AclTopic", f"m{i}".encode()))
            with pytest.raises(MQClientError) as refused:
                await producer.send(Message("Forbidden", b"no"))
            # Retried as Java producers retry NO_PERMISSION, then reported with the remark.
            assert "NO_PERMISSION" in str(refused.value)
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "No PUB permission for topic Forbidden" in str(refused.value)
        async with Producer("PG2", namesrv_addr=namesrv) as anonymous:
            with pytest.raises(MQClientError) as unsigned:
                await anonymous.send(Message("AclTopic", b"no"))
            assert "No accessKey is configured" in str(unsigned.value)

        validator = cluster.broker.acl
        assert validator is not None
        refused_before = validator.statistics().refused
        async with PullConsumer("AclGroup", namesrv_addr=namesrv, **keys) as consumer:
            await consumer.subscribe("AclTopic")
            got: list[bytes] = []
            with trio.fail_after(30):
                while len(got) < 4:
                    got += [m.body for m in await consumer.poll(timeout=1)]
            assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]
            await consumer.commit()

        # A push consumer: signed heartbeats (SUB on the group and topic), pulls, offsets.
        pushed: list[bytes] = []

        async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            pushed.extend(m.body for m in messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        push = PushConsumer(
            "AclGroup", listener, namesrv_addr=namesrv, consume_from_where=FIRST,
            offset_store_dir=tmp_path / "offsets", instance_name="push", **keys,
        )  # fmt: skip
        push.subscribe("AclTopic")
        async with push:
            async with Producer("PG", namesrv_addr=namesrv, **keys) as producer:
                await producer.send(Message("AclTopic", b"pushed"))
            await wait_until(lambda: b"pushed" in pushed, 60, "the pushed message consumed")
        # Consumers with credentials were never refused (heartbeats, pulls, offsets).
        assert validator.statistics().refused == refused_before

        async with Admin(
            namesrv_addr=namesrv, access_key="adminuser", secret_key="admin-secret"
        ) as admin:
            await admin.create_topic("AdminMade", broker_addr=cluster.broker_address)
        async with Admin(namesrv_addr=namesrv, **keys) as not_admin:
            with pytest.raises(MQClientError, match="Need admin permission"):
                await not_admin.create_topic("NotMade", broker_addr=cluster.broker_address)


async def test_registry_acl(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_acl(acl_file, ACL)
    config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=None,
        acl_enable=True,
        plain_acl_file=str(acl_file),
    )
    # A broker registers with an admin account's keys (REGISTER_BROKER is admin-only).
    async with (
        open_registry(config) as registry,
        boltmq.embedded(
            tmp_path / "data", namesrv_addr=registry.address,
            access_key="adminuser", secret_key="admin-secret",
        ) as cluster,
        RemotingClient() as client,
    ):  # fmt: skip
        route = {"topic": cluster.broker.config.broker_cluster_name}
        code = RequestCode.GET_ROUTEINFO_BY_TOPIC
        answer = await call(client, registry.address, code, route)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark is not None and "No accessKey" in answer.remark
        answer = await call(client, registry.address, code, route, PRODUCER)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        register = {"brokerName": "rogue", "brokerAddr": "127.0.0.1:1", "clusterName": "c",
                    "haServerAddr": "", "brokerId": "0"}  # fmt: skip
        answer = await call(client, registry.address, RequestCode.REGISTER_BROKER, register,
                            PRODUCER)  # fmt: skip
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark is not None and "Need admin permission" in answer.remark


async def test_missing_file_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "plain_acl.yml"
    config = RegistryConfig(
        listen_port=0, bind_address="127.0.0.1", kv_config_path=None,
        acl_enable=True, plain_acl_file=str(missing),
    )  # fmt: skip
    with pytest.raises(ExceptionGroup) as failed:  # the registry starts in a nursery
        async with open_registry(config):
            pass
    assert failed.group_contains(AclConfigError, match=f"{missing} does not exist")
    properties = {"aclEnable": "true", "plainAclFile": str(missing)}
    assert RegistryConfig.from_properties(properties).acl_enable is True
    with pytest.raises(ExceptionGroup) as failed:  # the broker starts in a nursery
        async with boltmq.embedded(tmp_path / "data", acl_enable=True, plain_acl_file=str(missing)):
            pass
    assert failed.group_contains(AclConfigError, match=f"{missing} does not exist")


async def signed_send_is_checked(broker: str) -> None:
    """A send is refused unsigned and taken signed: the broker runs on the ACL file."""
    async with RemotingClient() as client:
        send = RequestCode.SEND_MESSAGE_V2
        answer = await call(client, broker, send, send_fields("AclTopic"))
        assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
        answer = await call(client, broker, send, send_fields("AclTopic"), PRODUCER)
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_broker_reads_conf_plain_acl_under_rocketmq_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    write_acl(home / "conf" / "plain_acl.yml", ACL)
    async with boltmq.embedded(tmp_path / "data", acl_enable=True, rocketmq_home=str(home)) as c:
        assert c.broker.config.plain_acl_path == home / "conf" / "plain_acl.yml"
        await signed_send_is_checked(c.broker_address)


async def test_broker_reads_it_under_the_rocketmq_home_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    write_acl(home / "conf" / "plain_acl.yml", ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    async with boltmq.embedded(tmp_path / "data", acl_enable=True) as cluster:
        assert cluster.broker.config.plain_acl_path == home / "conf" / "plain_acl.yml"
        await signed_send_is_checked(cluster.broker_address)


async def test_store_root_file_is_still_read_and_a_refusal_names_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "rocketmq"  # set, but without conf/plain_acl.yml
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    store_file = tmp_path / "data" / "store" / "config" / "plain_acl.yml"
    with pytest.raises(ExceptionGroup) as failed:
        async with boltmq.embedded(tmp_path / "data", acl_enable=True):
            pass
    looked = f"looked at {home / 'conf' / 'plain_acl.yml'}, then {store_file}"
    assert failed.group_contains(AclConfigError, match=re.escape(looked))
    store_file.parent.mkdir(parents=True, exist_ok=True)
    write_acl(store_file, ACL)
    async with boltmq.embedded(tmp_path / "data", acl_enable=True) as cluster:
        assert cluster.broker.config.plain_acl_path == store_file
        await signed_send_is_checked(cluster.broker_address)
    monkeypatch.delenv("ROCKETMQ_HOME")
    store_file.unlink()
    with pytest.raises(ExceptionGroup) as failed:
        async with boltmq.embedded(tmp_path / "data", acl_enable=True):
            pass
    assert failed.group_contains(AclConfigError, match=re.escape(f"looked at {store_file};"))


async def test_websocket_listener_is_checked_too(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_acl(acl_file, ACL)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        ws_port = int(probe.getsockname()[1])
    async with (
        boltmq.embedded(
            tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file),
            websocket_listen_port=ws_port,
        ),
        RemotingClient() as plain,
        RemotingClient(rpc_hook=PRODUCER.sign) as signing,
    ):  # fmt: skip
        address = f"ws://127.0.0.1:{ws_port}/"
        send = RequestCode.SEND_MESSAGE_V2
        answer = await call(plain, address, send, send_fields("AclTopic"))
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark is not None and "No accessKey" in answer.remark
        answer = await call(signing, address, send, send_fields("AclTopic"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
