"""What a real broker's pull answers hold decodes the same through the pull consumer's fast
decoder (`decode_records`, pure and compiled) as record by record (`iter_records`): batches
(the broker adds CLUSTER after UNIQ_KEY), single sends with tags, keys and user properties,
and bodies compressed by the producer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import client.pull_consumer
from client import Message, Producer, PullConsumer
from protocol.bodies import ConsumeFromWhere
from protocol.message import Buffer, MessageExt, MessageSysFlag, _record, iter_records
from tests.compiled import speedups

from .helpers import poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_pull_answers_decode_as_record_by_record(
    cluster: Any, unique: Callable[[str], str], anyio_backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    topic = unique("DecodeTopic")
    answers: list[bytes] = []
    decode = client.pull_consumer.decode_records

    def keep(body: Buffer) -> list[MessageExt]:
        answers.append(bytes(body))
        return decode(body)

    monkeypatch.setattr(client.pull_consumer, "decode_records", keep)
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        for _ in range(2):
            await producer.send_batch([Message(topic, b"b" * 100) for _ in range(20)])
        for i in range(6):
            await producer.send(Message(
                topic, f"s{i}".encode() * (3000 if i == 5 else 1), tags=f"T{i % 2}",
                keys=[f"k{i}", "shared"], properties={"ü": "é", "n": str(i)},
            ))  # fmt: skip
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            auto_commit=False) as consumer:  # fmt: skip
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 46)
    assert sorted(m.body for m in got).count(b"b" * 100) == 40
    # The consumer hands the large body back inflated, its flag cleared.
    [large] = [m for m in got if len(m.body) == 6000]
    assert large.body == b"s5" * 3000 and not large.sys_flag & MessageSysFlag.COMPRESSED
    records = [m for body in answers for m in iter_records(body)]
    assert len(records) == 46
    # The broker's stamp after the producer's id: what the cache of the decoder must see past.
    batch = next(m for m in records if m.body == b"b" * 100)
    assert list(batch.properties)[-2:] == ["UNIQ_KEY", "CLUSTER"]
    assert any(m.properties.get("ü") == "é" for m in records)
    assert any(m.sys_flag & MessageSysFlag.COMPRESSED for m in records)
    decoders = [_record.decode_records_py] + ([speedups.decode_records] if speedups else [])
    for fast in decoders:
        for body in answers:
            expected = [(attrs.astuple(m), list(m.properties)) for m in iter_records(body)]
            assert [(attrs.astuple(m), list(m.properties)) for m in fast(body)] == expected
