"""The broker's registration after topic changes: only the changed topics, with the new data
version, to a registry that holds the previous round; the whole table to one that does not.

A real registry and a real broker on loopback; the registry's REGISTER_BROKER handler is
wrapped to note which topics each registration carried.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

import boltmq
from actors.registry import RegistryConfig, open_registry
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.connection import Connection
from protocol.headers import CreateTopicRequestHeader, DeleteTopicRequestHeader, encode_header


def create(topic: str) -> RemotingCommand:
    header = CreateTopicRequestHeader(
        topic=topic, default_topic="TBW102", read_queue_nums=2, write_queue_nums=2,
        perm=6, topic_filter_type="SINGLE_TAG", order=False,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header))


async def routed(client: RemotingClient, registry: str, topic: str) -> bool:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    answer = await client.invoke(registry, request)
    return answer.code == ResponseCode.SUCCESS


async def test_a_created_topic_is_registered_alone_and_a_new_registry_gets_every_topic(
    tmp_path: Path,
) -> None:
    seen: list[set[str]] = []  # the topics of each REGISTER_BROKER, in arrival order
    config = RegistryConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=None)
    async with open_registry(config) as registry, RemotingClient() as client:
        _, real = registry.dispatcher._handlers[RequestCode.REGISTER_BROKER]

        async def noting(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            body = orjson.loads(request.body or b"{}")
            tables = body.get("topicConfigSerializeWrapper", {}).get("topicConfigTable", {})
            seen.append(set(tables))
            return await real(conn, request)  # type: ignore[no-any-return, misc]

        registry.dispatcher.register(RequestCode.REGISTER_BROKER, noting)
        async with boltmq.open_broker(
            boltmq.BrokerConfig(
                listen_port=0, bind_address="127.0.0.1", fast_port_enable=False,
                store_path_root_dir=str(tmp_path / "store"), namesrv_addr=registry.address,
            )
        ) as broker:  # fmt: skip
            registrar = broker.registrar
            assert registrar is not None
            with trio.fail_after(20):
                while not seen:
                    await trio.sleep(0.01)
                everything = set(seen[0])
                assert "TBW102" in everything  # the first registration is in full
                for n in range(3):
                    topic = f"Inc{n}"
                    answer = await client.invoke(broker.address, create(topic))
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    while not await routed(client, registry.address, topic):
                        await trio.sleep(0.01)
                    everything.add(topic)
                assert registrar.increments >= 1
                # Every registration after the first carried only created topics.
                assert all(s <= {"Inc0", "Inc1", "Inc2"} for s in seen[1:]), seen
                for topic in everything:
                    assert await routed(client, registry.address, topic), topic

                # A deletion goes in full (the table without the topic).
                delete = RemotingCommand.request(
                    RequestCode.DELETE_TOPIC_IN_BROKER,
                    encode_header(DeleteTopicRequestHeader(topic="Inc0")),
                )
                before = len(seen)
                answer = await client.invoke(broker.address, delete)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                while len(seen) == before:
                    await trio.sleep(0.01)
                assert seen[before] == everything - {"Inc0"}

            # A registry that never heard of this broker gets the whole table at once.
            async with open_registry(config) as late:
                broker.config.namesrv_addr = f"{registry.address};{late.address}"
                answer = await client.invoke(broker.address, create("Inc3"))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                with trio.fail_after(20):
                    for topic in everything - {"Inc0"} | {"Inc3"}:
                        while not await routed(client, late.address, topic):
                            await trio.sleep(0.01)
