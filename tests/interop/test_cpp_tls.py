"""The official RocketMQ C++ client (plaintext only) against a broker whose listener is in
tlsServerMode permissive: the port tells its plaintext frames from TLS and serves them, while
a TLS client uses the same port.

Loopback only, ephemeral ports, the certificate made with openssl, a deadline on every wait.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

import boltmq
from protocol import RemotingClient, RequestCode
from protocol.command import RemotingCommand
from tests.client.test_websocket import make_certificates

from .cpp_client import rocketmq
from .test_cpp_client import Inbox, text, unique, wait_for

pytestmark = pytest.mark.timeout(180)


async def test_cpp_client_over_plaintext_against_a_permissive_broker(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    ca, cert, key = make_certificates(tmp_path)
    topic, group = unique("CppTlsTopic"), unique("CppTlsGroup")
    async with boltmq.embedded(
        tmp_path / "data",
        tls_server_mode="permissive",
        tls_server_cert_path=str(cert),
        tls_server_key_path=str(key),
    ) as cluster:
        namesrv = cluster.registry_address
        producer = rocketmq.Producer(unique("PG"))
        producer.set_namesrv_addr(namesrv)
        await trio.to_thread.run_sync(producer.start)
        bodies = [f"plaintext {i}".encode() for i in range(10)]
        try:
            for body in bodies:
                message = rocketmq.Message(topic)
                message.set_body(body)
                result = await trio.to_thread.run_sync(producer.send_sync, message)
                assert result.status == rocketmq.SendStatus.OK
        finally:
            await trio.to_thread.run_sync(producer.shutdown)

        inbox = Inbox()
        consumer = rocketmq.PushConsumer(group)
        consumer.set_namesrv_addr(namesrv)
        consumer.subscribe(topic, inbox, "*")
        await trio.to_thread.run_sync(consumer.start)
        try:
            await wait_for(lambda: len(inbox.snapshot()) >= 10, 60, "10 plaintext messages")
        finally:
            await trio.to_thread.run_sync(consumer.shutdown)
        assert sorted(m["body"] for m in inbox.snapshot()) == sorted(bodies)
        assert {text(m["topic"]) for m in inbox.snapshot()} == {topic}

        # The same broker port answers a TLS client too.
        async with RemotingClient(tls_ca_file=str(ca)) as client:
            with trio.fail_after(30):
                answer = await client.invoke(
                    cluster.broker_address,
                    RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                    20,
                )
        assert answer.code == 0 and answer.body
