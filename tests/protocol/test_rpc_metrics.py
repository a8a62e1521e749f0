"""RpcLatency counts each answer once, inline or `Later`, from the request's dispatch."""

from __future__ import annotations

from typing import cast

import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Later
from protocol.rpc_metrics import RpcLatency

CODE = 9100


async def test_a_later_answer_is_counted_once_with_its_wait() -> None:
    latency = RpcLatency()

    async def held(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        await trio.sleep(0.05)
        return request.response(ResponseCode.PULL_NOT_FOUND)

    def handler(connection: Connection, request: RemotingCommand) -> RemotingCommand | Later:
        if request.field("hold", ""):
            return Later(held)
        return request.response(ResponseCode.SUCCESS)

    timed = latency.timed(handler)
    connection = cast(Connection, None)  # the handlers never look at it
    inline = timed(connection, RemotingCommand.request(CODE))
    assert isinstance(inline, RemotingCommand)
    later = timed(connection, RemotingCommand.request(CODE, {"hold": "1"}))
    assert isinstance(later, Later)
    assert ResponseCode.PULL_NOT_FOUND not in latency.counts[CODE]  # not answered yet
    answer = await later.handler(connection, RemotingCommand.request(CODE, {"hold": "1"}))
    assert answer is not None and answer.code == ResponseCode.PULL_NOT_FOUND
    counts = latency.counts[CODE]
    assert sum(counts[ResponseCode.SUCCESS][1:]) == 1
    assert sum(counts[ResponseCode.PULL_NOT_FOUND][1:]) == 1
    assert counts[ResponseCode.PULL_NOT_FOUND][0] >= 50  # ms, the wait included
