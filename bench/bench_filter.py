"""Pull throughput with a SQL92 subscription beside a tag subscription (enablePropertyFilter).

A broker in this process (ASYNC_FLUSH, the file store in a temporary directory) holds a topic
of 4 queues filled with 1 KiB messages, alternately tagged TagA and TagB, each with the
property ``a`` = 0..9 in turn. Each cell reads every queue from offset 0 to its end with pulls
of 32, as a consumer catching up would, and prints the messages handed over per second, the
messages the broker looked at per second (the handed-over ones and those it filtered out) and
the broker's CPU per message looked at:

- ``all``: subscription ``*`` (nothing filtered, the baseline);
- ``tag``: ``TagA`` (half match; the consume queue's tag hash decides, no record is read);
- ``sql92 x1``: one group with ``a >= 5`` (half match; each record's properties are read);
- ``sql92 x10``: ten groups at once, group k with ``a = k`` (a tenth each), pulling
  concurrently, so ten compiled expressions are in use.

The client and the broker share this process: read the cells against each other, not as the
broker's own ceiling (bench broker measures that).

    python -m bench filter [--messages 100000] [--quick]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import trio

import boltmq
from client import Admin, Message, Producer
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import PullMessageRequestHeader, encode_header
from protocol.message import iter_records

TOPIC = "FilterBench"
QUEUES = 4
BODY = b"x" * 1024
#: sysFlag bit of a pull that carries its subscription (RocketMQ's PullSysFlag).
HAS_SUBSCRIPTION = 0x4


def _pull(group: str, queue_id: int, offset: int, expression: str, kind: str) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=group, topic=TOPIC, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, sys_flag=HAS_SUBSCRIPTION, commit_offset=0, suspend_timeout_millis=0,
        subscription=expression, sub_version=1, expression_type=kind,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


async def _read_all(
    client: RemotingClient, broker: str, group: str, expression: str, kind: str
) -> tuple[int, int]:
    """Every queue from 0 to its end: (messages handed over, messages looked at)."""
    handed = looked = 0
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            answer = await client.invoke(broker, _pull(group, queue_id, offset, expression, kind))
            fields = answer.ext_fields or {}
            following = int(fields.get("nextBeginOffset", offset))
            if answer.code == ResponseCode.SUCCESS and answer.body:
                handed += sum(1 for _ in iter_records(answer.body, read_body=False))
            elif answer.code not in (
                ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND
            ):
                raise RuntimeError(f"pull refused: {answer.code} {answer.remark}")
            looked += following - offset
            if following <= offset or int(fields.get("maxOffset", following)) <= following:
                break
            offset = following
    return handed, looked


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _fill(namesrv: str, messages: int) -> None:
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(TOPIC, queue_nums=QUEUES)
    async with Producer("FilterBenchPG", namesrv_addr=namesrv) as producer:
        queues = await producer.queues(TOPIC)
        for start in range(0, messages, 32):
            batch = [
                Message(TOPIC, BODY, tags="TagA" if i % 2 == 0 else "TagB",
                        properties={"a": str(i % 10)})
                for i in range(start, min(start + 32, messages))
            ]  # fmt: skip
            await producer.send_batch(batch, queue=queues[(start // 32) % len(queues)])


async def _run(messages: int) -> None:
    with tempfile.TemporaryDirectory(prefix="boltmq-filter-") as home:
        async with boltmq.embedded(Path(home), enable_property_filter=True) as cluster:
            print(f"filling {TOPIC}: {messages:,} messages of 1 KiB in {QUEUES} queues")
            await _fill(cluster.registry_address, messages)
            broker = cluster.broker_address
            cells = [
                ("all", [("FilterAll", "*", "TAG")]),
                ("tag", [("FilterTag", "TagA", "TAG")]),
                ("sql92 x1", [("FilterSql", "a >= 5", "SQL92")]),
                ("sql92 x10", [(f"FilterSql{k}", f"a = {k}", "SQL92") for k in range(10)]),
            ]
            print(f"{'cell':<10} {'handed/s':>12} {'looked at/s':>12} {'cpu us/looked':>14}")
            async with RemotingClient() as client:
                for name, groups in cells:
                    totals = [0, 0]

                    async def read(
                        totals: list[int], group: str, expression: str, kind: str
                    ) -> None:
                        handed, looked = await _read_all(client, broker, group, expression, kind)
                        totals[0] += handed
                        totals[1] += looked

                    started, cpu = time.perf_counter(), _cpu()
                    async with trio.open_nursery() as nursery:
                        for group, expression, kind in groups:
                            nursery.start_soon(read, totals, group, expression, kind)
                    took, used = time.perf_counter() - started, _cpu() - cpu
                    print(
                        f"{name:<10} {totals[0] / took:>12,.0f} {totals[1] / took:>12,.0f} "
                        f"{used / max(totals[1], 1) * 1e6:>14.2f}"
                    )


def main(argv: list[str] | None = None) -> None:
    """Run the cells and print one line each."""
    parser = argparse.ArgumentParser(
        prog="python -m bench filter",
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m bench filter --messages 200000",
    )
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the topic")
    parser.add_argument("--quick", action="store_true", help="10,000 messages")
    args = parser.parse_args(argv)
    trio.run(_run, 10_000 if args.quick else args.messages)


if __name__ == "__main__":
    main()
