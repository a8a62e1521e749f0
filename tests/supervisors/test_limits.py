"""A server raises its soft open-file limit to the hard one at start (the store maps one
file per consume queue, each holding a descriptor)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_soft_limit_is_raised_to_the_hard_limit() -> None:
    out = _run("""
        import resource
        from supervisors.limits import raise_open_file_limit
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        soft, reported_hard = raise_open_file_limit()
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        print(soft == now, soft > 256, reported_hard == hard)
    """)
    assert out == "True True True"


def test_a_broker_started_with_a_low_soft_limit_serves_more_queues_than_it() -> None:
    # Soft limit 256: 400 queues each get a message through a real broker (each queue's file
    # holds a descriptor, so without the raise the store would stop at about 250).
    out = _run("""
        import resource, trio, boltmq
        from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
        from protocol.headers import (
            CreateTopicRequestHeader, SendMessageRequestHeader, encode_header,
            encode_send_header_v2,
        )
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

        async def main() -> None:
            async with boltmq.embedded() as cluster, RemotingClient() as client:
                address = cluster.broker_address
                for t in range(50):
                    header = CreateTopicRequestHeader(
                        topic=f"LimitTopic{t}", default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
                        read_queue_nums=8,
                        write_queue_nums=8, perm=6, topic_filter_type="SINGLE_TAG", order=False,
                    )
                    request = RemotingCommand.request(
                        RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header)
                    )
                    assert (await client.invoke(address, request, 30)).code == ResponseCode.SUCCESS
                    for q in range(8):
                        header = SendMessageRequestHeader(
                            producer_group="PG_limits", topic=f"LimitTopic{t}",
                            default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
                            default_topic_queue_nums=8, queue_id=q,
                            sys_flag=0, born_timestamp=0, flag=0, properties="",
                        )
                        request = RemotingCommand.request(
                            RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), b"x"
                        )
                        answer = await client.invoke(address, request, 30)
                        assert answer.code == ResponseCode.SUCCESS, (t, q, answer.remark)
                store = cluster.broker.store
                print(store.get_max_offset_in_queue("LimitTopic49", 7),
                      resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256)

        trio.run(main)
    """)
    assert out == "1 True"
