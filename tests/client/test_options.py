"""The connection options record: given as ``options=`` or as the seven old keywords, the same
settings reach the connection, and a broker with ACL on accepts the signature either way.

Loopback only, ephemeral ports, the ACL file written to ``tmp_path``, a deadline on every wait.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from client import (
    Admin,
    ClientInstance,
    ConnectionOptions,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
    TransactionProducer,
)
from client.options import connection_options
from protocol.codes import ResponseCode

ACL = """
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclTopic=PUB|SUB
    groupPerms:
      - CG=SUB
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
"""

PRODUCER = ConnectionOptions(access_key="producer1", secret_key="producer-secret")
KEYWORDS = {"access_key": "producer1", "secret_key": "producer-secret"}
NAMESRV = "127.0.0.1:1"


def _listener(messages: object) -> None:
    return None


# Each client class, built from keyword arguments (its connection settings added).
CLIENTS: dict[str, Callable[..., Any]] = {
    "ClientInstance": lambda **kw: ClientInstance(NAMESRV, **kw),
    "Producer": lambda **kw: Producer("PG", namesrv_addr=NAMESRV, **kw),
    "TransactionProducer": lambda **kw: TransactionProducer(
        "TPG", check_listener=lambda message: None, namesrv_addr=NAMESRV, **kw
    ),
    "PullConsumer": lambda **kw: PullConsumer("CG", namesrv_addr=NAMESRV, **kw),
    "PushConsumer": lambda **kw: PushConsumer("CG", _listener, namesrv_addr=NAMESRV, **kw),
    "Admin": lambda **kw: Admin(namesrv_addr=NAMESRV, **kw),
}


def _instance(client: Any) -> ClientInstance:
    return client if isinstance(client, ClientInstance) else client.instance


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_record_and_the_keywords_configure_the_connection_alike(name: str) -> None:
    make = CLIENTS[name]
    record = ConnectionOptions(tls=True, access_key="producer1", secret_key="producer-secret")
    by_record = _instance(make(options=record))
    by_keywords = _instance(make(tls=True, **KEYWORDS))
    assert by_record.options == by_keywords.options == record
    for instance in (by_record, by_keywords):
        assert instance.remoting.tls is True
        assert instance.remoting.tls_ca_file is None
        assert instance.credentials is not None
        assert instance.credentials.access_key == "producer1"
        assert instance.remoting.rpc_hook is not None
    plain = _instance(make())
    assert plain.options == ConnectionOptions()
    assert plain.remoting.tls is False and plain.remoting.rpc_hook is None


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_record_and_a_keyword_together_are_refused(name: str) -> None:
    with pytest.raises(TypeError, match="options= or tls_cert_file, access_key, not both"):
        CLIENTS[name](options=PRODUCER, tls_cert_file="client.pem", access_key="x")


def test_the_keywords_alone_or_the_record_alone_are_taken_as_given() -> None:
    keywords = ConnectionOptions(tls_ca_file="ca.pem")
    assert connection_options(None, keywords) is keywords
    assert connection_options(PRODUCER, ConnectionOptions()) is PRODUCER
    # The secrets stay out of logs and tracebacks.
    assert "producer-secret" not in repr(PRODUCER)


async def test_an_acl_broker_takes_the_signature_either_way(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    with trio.fail_after(60):
        async with boltmq.embedded(
            tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
        ) as cluster:
            namesrv = cluster.registry_address
            admin_options = ConnectionOptions(access_key="adminuser", secret_key="admin-secret")
            async with Admin(namesrv_addr=namesrv, options=admin_options) as admin:
                await admin.create_topic("AclTopic", broker_addr=cluster.broker_address)
            async with (
                Producer("PG", namesrv_addr=namesrv, options=PRODUCER) as by_record,
                Producer("PG2", namesrv_addr=namesrv, **KEYWORDS) as by_keywords,
            ):
                for producer in (by_record, by_keywords):
                    result = await producer.send(Message("AclTopic", b"signed"))
                    assert result.status == SendStatus.SEND_OK
            wrong = ConnectionOptions(access_key="producer1", secret_key="not-the-secret")
            async with Producer("PG3", namesrv_addr=namesrv, options=wrong) as refused:
                with pytest.raises(MQClientError) as error:
                    await refused.send(Message("AclTopic", b"no"))
            assert error.value.code == ResponseCode.NO_PERMISSION
            assert "Check signature failed" in str(error.value)
            async with PullConsumer("CG", namesrv_addr=namesrv, options=PRODUCER) as consumer:
                await consumer.subscribe("AclTopic")
                got: list[bytes] = []
                while len(got) < 2:
                    got += [m.body for m in await consumer.poll(timeout=1)]
            assert got == [b"signed", b"signed"]
