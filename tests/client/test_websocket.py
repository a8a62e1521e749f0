"""The client over websocket beyond the suite's cases run on both transports: a consumer group
with one TCP and one websocket member, wss:// with a certificate made here, bad addresses.

Loopback only; every wait has a deadline. On trio and on asyncio.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from client import (
    ClientInstance,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from tests.support.waiting import wait_until

from .helpers import BoltProcess, create_topic, free_port, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


async def test_a_group_with_a_tcp_and_a_websocket_member_shares_the_queues(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("MixedTopic"), unique("CG")
    await create_topic(cluster, topic, 8)
    got: dict[str, list[MessageExt]] = {"tcp": [], "ws": []}

    def listener(transport: str) -> Callable[[list[MessageExt]], Any]:
        async def consume(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            got[transport].extend(messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        return consume

    over_tcp = PushConsumer(group, listener("tcp"), namesrv_addr=cluster.process.namesrv,
                            consume_from_where=FIRST)  # fmt: skip
    over_ws = PushConsumer(group, listener("ws"), namesrv_addr=cluster.process.ws_namesrv,
                           consume_from_where=FIRST)  # fmt: skip
    for member in (over_tcp, over_ws):
        member.subscribe(topic)

    def blocks() -> list[list[int]]:
        ordered = sorted((over_tcp, over_ws), key=lambda c: c.instance.client_id)
        return [sorted(q.queue_id for q in c.assignment() if q.topic == topic) for c in ordered]

    async with over_tcp, over_ws:
        # The broker tells both members of the group change, each over its own transport.
        await wait_until(lambda: blocks() == [[0, 1, 2, 3], [4, 5, 6, 7]], timeout=30)
        assert all(a.startswith("ws://") for a in over_ws.instance.remoting.addresses())
        assert not any(a.startswith("ws://") for a in over_tcp.instance.remoting.addresses())
        async with Producer(unique("PG"), namesrv_addr=cluster.process.ws_namesrv) as producer:
            sent = {(await producer.send(Message(topic, f"m{i}".encode()))).msg_id
                    for i in range(40)}  # fmt: skip
        every = lambda: [m.msg_id for m in got["tcp"] + got["ws"]]  # noqa: E731
        await wait_until(lambda: set(every()) >= sent, timeout=30)
        owned = {
            transport: {q.queue_id for q in member.assignment() if q.topic == topic}
            for transport, member in (("tcp", over_tcp), ("ws", over_ws))
        }
    assert sorted(every()) == sorted(sent)  # each message once, to one member
    for transport, mine in owned.items():
        assert got[transport] and {m.queue_id for m in got[transport]} <= mine


async def test_a_malformed_websocket_namesrv_is_refused_clearly(anyio_backend: str) -> None:
    with pytest.raises(ValueError, match="needs a host and a port"):
        ClientInstance("ws://localhost/")
    with pytest.raises(ValueError, match="is not a ws:// or wss:// address"):
        ClientInstance("http://127.0.0.1:9877/")


async def test_an_unreachable_websocket_registry_fails_with_its_address(
    unique: Unique, anyio_backend: str
) -> None:
    dead = f"ws://127.0.0.1:{free_port()}/"
    with pytest.raises(MQClientError, match="no registry answered") as refused:
        async with Producer(unique("PG"), namesrv_addr=dead) as producer:
            with anyio.fail_after(10):
                await producer.send(Message(unique("T"), b"x"))
    assert dead in str(refused.value)


# ----------------------------------------------------------------------------------- wss://


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, key)."""
    names = ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    ca_key, ca, key, csr, cert = (directory / name for name in names)
    ext = directory / "server.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=BoltMQ test CA", "-keyout", ca_key,
         "-out", ca, "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "2", "-out", cert, "-extfile", ext],
    ]  # fmt: skip
    for step in steps:
        subprocess.run(["openssl", *map(str, step)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BoltProcess, Path]]:
    """A cluster whose registry and broker listen on wss:// with a certificate made here."""
    if shutil.which("openssl") is None:
        pytest.fail("the wss:// tests make their certificate with the openssl command; install it")
    home = tmp_path_factory.mktemp("tls-cluster")
    ca, cert, key = make_certificates(home)
    ws_registry = free_port()
    running = BoltProcess(
        home, "cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
        "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--mapedFileSizeCommitLog", str(16 << 20),
        "--registryWebsocketPort", str(ws_registry), "--websocketListenPort", str(free_port()),
        "--websocketTlsCertPath", str(cert), "--websocketTlsKeyPath", str(key),
    )  # fmt: skip
    running.found["wss_registry"] = f"wss://127.0.0.1:{ws_registry}/"
    try:
        yield running, ca
    finally:
        running.stop()


async def test_wss_end_to_end_with_the_ca_file(
    tls_cluster: tuple[BoltProcess, Path], unique: Unique, anyio_backend: str
) -> None:
    running, ca = tls_cluster
    wss = running.found["wss_registry"]
    topic = unique("TlsTopic")
    async with Producer(unique("PG"), namesrv_addr=wss, tls_ca_file=str(ca)) as producer:
        result = await producer.send(Message(topic, b"over tls", tags="T"))
        addresses = producer.instance.remoting.addresses()
    assert len(addresses) == 2 and all(a.startswith("wss://") for a in addresses), addresses
    async with PullConsumer(unique("CG"), namesrv_addr=wss, tls_ca_file=str(ca),
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        with anyio.fail_after(10):
            while await consumer.instance.update_route(topic) is None:
                await anyio.sleep(0.05)
        await consumer.subscribe(topic)
        [got] = await poll_until(consumer, 1)
    assert (got.body, got.tags, got.msg_id) == (b"over tls", "T", result.msg_id)


async def test_wss_without_the_ca_is_refused_and_the_server_serves_on(
    tls_cluster: tuple[BoltProcess, Path], unique: Unique, anyio_backend: str
) -> None:
    running, ca = tls_cluster
    wss = running.found["wss_registry"]
    with pytest.raises(MQClientError, match="CERTIFICATE_VERIFY_FAILED"):
        async with Producer(unique("PG"), namesrv_addr=wss) as producer:
            with anyio.fail_after(10):
                await producer.send(Message(unique("T"), b"x"))
    with pytest.raises(ValueError, match="cannot load the CA file"):
        async with Producer(unique("PG"), namesrv_addr=wss, tls_ca_file="/nonexistent.pem") as p:
            await p.send(Message(unique("T"), b"x"))
    # The listener took the failed handshakes in its stride.
    async with Producer(unique("PG"), namesrv_addr=wss, tls_ca_file=str(ca)) as producer:
        assert (await producer.send(Message(unique("T"), b"y"))).queue_offset == 0
