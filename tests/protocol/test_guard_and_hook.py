"""The dispatcher guard (a check before every handler) and the client's request hook, over TCP
and websocket (fixture `harness`). Loopback only, ephemeral ports, a deadline on every wait."""

from __future__ import annotations

import trio

from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection

from .helpers import ECHO, RECORD, SLOW, Harness


def refuse_unmarked(connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
    if request.field("mark") == "ok":
        return None
    return request.response(ResponseCode.NO_PERMISSION, f"unmarked request from {connection.peer}")


def mark(request: RemotingCommand) -> None:
    request.ext_fields = {**(request.ext_fields or {}), "mark": "ok"}


async def test_guard_checks_sync_async_and_later_handlers(harness: Harness) -> None:
    dispatcher = harness.server.dispatcher
    dispatcher.install_guard(refuse_unmarked)
    late = 9100
    dispatcher.register(late, lambda conn, request: request.response(ResponseCode.SUCCESS))
    async with RemotingClient() as plain, RemotingClient(rpc_hook=mark) as marking:
        with trio.fail_after(10):
            for code in (ECHO, SLOW, RECORD, late):  # inline, task, recording, registered later
                refused = await plain.invoke(harness.address, RemotingCommand.request(code))
                assert refused.code == ResponseCode.NO_PERMISSION
                assert refused.remark is not None and "unmarked request" in refused.remark
                allowed = await marking.invoke(harness.address, RemotingCommand.request(code))
                assert allowed.code == ResponseCode.SUCCESS, allowed.remark
            # The hook ran before the request was encoded: the handler saw its field.
            echoed = await marking.invoke(harness.address, RemotingCommand.request(ECHO))
            assert echoed.ext_fields == {"mark": "ok"}
    assert all(request.field("mark") == "ok" for request in harness.recorded)
    assert len(harness.recorded) == 1
