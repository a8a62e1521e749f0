"""Remoting server behaviour, the same cases over TCP and over websocket (fixture `harness`)."""

from __future__ import annotations

import logging
import os
import resource
import struct

import pytest
import trio

from protocol.client import RemotingClient
from protocol.codes import ResponseCode, SerializeType
from protocol.command import ConnectionClosedError, RemotingCommand, RemotingTimeoutError
from protocol.frame import encode
from protocol.server import ServerConfig

from .helpers import (
    ECHO,
    FAIL,
    MAYBE_SLOW,
    RECORD,
    SLOW,
    Harness,
    frame,
    raw_length_frame,
    start_harness,
)


async def test_echo_round_trip_with_body(harness: Harness) -> None:
    async with RemotingClient() as client:
        with trio.fail_after(5):
            request = RemotingCommand.request(ECHO, {"k": "v"}, b"payload")
            response = await client.invoke(harness.address, request)
    assert response.code == ResponseCode.SUCCESS
    assert response.opaque == request.opaque
    assert response.is_response
    assert response.ext_fields == {"k": "v"}
    assert response.body == b"payload"


@pytest.mark.parametrize(
    ("held", "quick"),
    [(SLOW, ECHO), (MAYBE_SLOW, MAYBE_SLOW)],
    ids=["async-handler", "plain-handler-answers-later"],
)
async def test_concurrent_requests_answered_out_of_order(
    harness: Harness, held: int, quick: int
) -> None:
    # An async handler runs in a task of its own; so does the part of a plain handler that
    # returns Later (MAYBE_SLOW answers inline without a delay): the requests after either
    # are answered meanwhile.
    finished: list[str] = []
    answers: dict[str, RemotingCommand] = {}
    async with RemotingClient() as client:

        async def call(name: str, request: RemotingCommand) -> None:
            response = await client.invoke(harness.address, request, timeout=5)
            assert response.opaque == request.opaque
            answers[name] = response
            finished.append(name)

        with trio.fail_after(5):
            await client.connection(harness.address)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    call, "slow", RemotingCommand.request(held, {"delayMillis": "300"})
                )
                await trio.sleep(0.05)  # the slow request is on the wire first
                nursery.start_soon(call, "quick", RemotingCommand.request(quick))
    assert finished == ["quick", "slow"]
    assert answers["slow"].field("slept") == "300"
    if quick == MAYBE_SLOW:
        assert answers["quick"].field("inline") == "true"


async def test_later_requests_do_not_count_against_max_in_flight(nursery: trio.Nursery) -> None:
    # Held Later requests (the broker's held pulls, bounded by maxHeldPulls) leave the reader
    # reading; async def handlers still stop it at max_in_flight.
    harness = await start_harness(nursery, "tcp", ServerConfig(max_in_flight=2, idle_timeout=None))
    async with RemotingClient() as client:
        await client.connection(harness.address)

        async def echo_while_held(code: int) -> tuple[float, list[float]]:
            """When the echo and each of four 1 s requests were answered (s since start)."""
            start = trio.current_time()
            held: list[float] = []
            echo: list[float] = []

            async def call(answered: list[float], request: RemotingCommand) -> None:
                await client.invoke(harness.address, request, timeout=10)
                answered.append(trio.current_time() - start)

            async with trio.open_nursery() as calls:
                for _ in range(4):
                    calls.start_soon(
                        call, held, RemotingCommand.request(code, {"delayMillis": "1000"})
                    )
                await trio.sleep(0.1)  # the held requests are on the wire first
                calls.start_soon(call, echo, RemotingCommand.request(ECHO))
            return echo[0], held

        with trio.fail_after(10):
            echo, held = await echo_while_held(MAYBE_SLOW)
            assert echo < min(held)
            # Backpressure: the echo is read only once a held request is answered, 1 s on.
            echo, held = await echo_while_held(SLOW)
            assert echo >= 0.9


async def test_raw_out_of_order_by_opaque(harness: Harness) -> None:
    raw = await harness.raw()
    with trio.fail_after(5):
        await raw.send(frame(SLOW, 7, {"delayMillis": "200"}))
        await raw.send(frame(ECHO, 8))
        first = await raw.receive()
        second = await raw.receive()
    await raw.aclose()
    assert first is not None and second is not None
    assert (first.opaque, second.opaque) == (8, 7)
    assert second.ext_fields == {"slept": "200"}


async def test_oneway_gets_no_answer(harness: Harness) -> None:
    raw = await harness.raw()
    with trio.fail_after(5):
        await raw.send(frame(RECORD, 11, {"x": "1"}, flag=0x2))
        await raw.send(frame(ECHO, 12))
        reply = await raw.receive()
    await raw.aclose()
    assert reply is not None and reply.opaque == 12  # nothing came back for opaque 11
    assert [r.opaque for r in harness.recorded] == [11]
    assert harness.recorded[0].is_oneway


async def test_unknown_code_is_not_supported(harness: Harness) -> None:
    async with RemotingClient() as client:
        with trio.fail_after(5):
            response = await client.invoke(harness.address, RemotingCommand.request(4242))
            again = await client.invoke(harness.address, RemotingCommand.request(ECHO))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in (response.remark or "")
    assert again.code == ResponseCode.SUCCESS


async def test_handler_error_answers_system_error_and_keeps_connection(harness: Harness) -> None:
    async with RemotingClient() as client:
        with trio.fail_after(5):
            response = await client.invoke(harness.address, RemotingCommand.request(FAIL))
            conn = await client.connection(harness.address)
            again = await client.invoke(harness.address, RemotingCommand.request(ECHO))
            assert conn is await client.connection(harness.address)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "ValueError" in (response.remark or "") and "refuses" in (response.remark or "")
    assert again.code == ResponseCode.SUCCESS


async def test_response_uses_request_serialize_type(harness: Harness) -> None:
    raw = await harness.raw()
    request = RemotingCommand(ECHO, opaque=21, ext_fields={"a": "b"}, body=b"xyz")
    request.serialize_type = SerializeType.ROCKETMQ
    with trio.fail_after(5):
        await raw.send(encode(request))
        reply = await raw.receive()
    await raw.aclose()
    assert reply is not None
    assert reply.serialize_type == SerializeType.ROCKETMQ
    assert (reply.opaque, reply.ext_fields, reply.body) == (21, {"a": "b"}, b"xyz")


async def _assert_closed_and_others_served(harness: Harness, bad: bytes) -> None:
    good = await harness.raw()
    bad_client = await harness.raw()
    with trio.fail_after(5):
        await bad_client.send(bad)
        assert await bad_client.receive() is None  # the server closed the bad connection
        await good.send(frame(ECHO, 99))
        reply = await good.receive()
    assert reply is not None and reply.opaque == 99
    await good.aclose()
    await bad_client.aclose()


async def test_malformed_json_header_closes_only_that_connection(harness: Harness) -> None:
    header = b"{not json"
    bad = struct.pack(">iI", 4 + len(header), len(header)) + header
    await _assert_closed_and_others_served(harness, bad)


async def test_header_length_overrun_closes_connection(harness: Harness) -> None:
    bad = struct.pack(">iI", 8, 1000) + b"\0\0\0\0"
    await _assert_closed_and_others_served(harness, bad)


async def test_unknown_serialize_type_closes_connection(harness: Harness) -> None:
    bad = struct.pack(">iI", 6, (7 << 24) | 2) + b"{}"
    await _assert_closed_and_others_served(harness, bad)


async def test_oversize_frame_closes_connection(nursery: trio.Nursery) -> None:
    for kind in ("tcp", "ws"):
        harness = await start_harness(
            nursery, kind, ServerConfig(frame_limit=4096, idle_timeout=None)
        )
        await _assert_closed_and_others_served(harness, raw_length_frame(5000, b"\0" * 5000))
        # A length field beyond the limit is refused before the bytes arrive (TCP).
        if kind == "tcp":
            await _assert_closed_and_others_served(harness, raw_length_frame(1 << 30, b"\0\0\0\0"))


async def test_close_listener_sees_each_closed_connection(harness: Harness) -> None:
    async with RemotingClient() as client:
        with trio.fail_after(5):
            await client.invoke(harness.address, RemotingCommand.request(ECHO))
            assert len(harness.server.connections) == 1
    with trio.fail_after(5):
        await harness.closed_event.wait()
    assert len(harness.closed) == 1
    assert harness.server.statistics().connections == 0
    assert harness.server.statistics().closed_total == 1


async def test_idle_connection_is_closed(nursery: trio.Nursery) -> None:
    for kind in ("tcp", "ws"):
        harness = await start_harness(nursery, kind, ServerConfig(idle_timeout=0.3))
        raw = await harness.raw()
        with trio.fail_after(5):
            await raw.send(frame(ECHO, 1))
            assert await raw.receive() is not None
            assert await raw.receive() is None  # closed by the server after 0.3 s idle
            await harness.closed_event.wait()
        assert harness.closed and "idle" in (harness.closed[0].close_reason or "")
        await raw.aclose()


async def test_pending_calls_fail_when_connection_drops(harness: Harness) -> None:
    async with RemotingClient() as client:
        conn = await client.connection(harness.address)
        errors: list[Exception] = []

        async def call() -> None:
            try:
                await client.invoke(
                    harness.address, RemotingCommand.request(SLOW, {"delayMillis": "5000"}), 10
                )
            except ConnectionClosedError as exc:
                errors.append(exc)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                while not harness.server.connections:
                    await trio.sleep(0.01)
                await trio.sleep(0.05)
                for server_conn in list(harness.server.connections):
                    server_conn.close("test drops it")
        assert conn.closed
        assert len(errors) == 1 and "closed" in str(errors[0])


async def test_invoke_timeout_is_clear(harness: Harness) -> None:
    async with RemotingClient() as client:
        with trio.fail_after(5):
            try:
                await client.invoke(
                    harness.address,
                    RemotingCommand.request(SLOW, {"delayMillis": "2000"}),
                    timeout=0.2,
                )
            except RemotingTimeoutError as exc:
                assert "within 0.2s" in str(exc)
            else:
                raise AssertionError("expected a timeout")


async def test_answered_calls_leave_no_deadline_behind(harness: Harness) -> None:
    # Each call's deadline waits in one heap; answered ones must not pile up there for a
    # whole timeout (the garbage collector then walked tens of thousands of them), and a
    # slow call's deadline must survive the clean-up and still fire.
    async with RemotingClient() as client:
        with trio.fail_after(30):
            conn = await client.connection(harness.address)
            async with trio.open_nursery() as nursery:
                slow = trio.Event()
                timed_out: list[RemotingTimeoutError] = []

                async def slow_call() -> None:
                    request = RemotingCommand.request(SLOW, {"delayMillis": "20000"})
                    try:
                        await client.invoke(harness.address, request, timeout=2.5)
                    except RemotingTimeoutError as exc:
                        timed_out.append(exc)
                    slow.set()

                nursery.start_soon(slow_call)
                for _ in range(5000):
                    await client.invoke(harness.address, RemotingCommand.request(ECHO), timeout=60)
                    assert len(conn._deadlines) <= 2 * len(conn._pending) + 1025
                await slow.wait()
    assert len(timed_out) == 1 and "within 2.5s" in str(timed_out[0])
    assert all(type(x) in (int, float) for entry in conn._deadlines for x in entry)


async def test_client_reconnects_after_server_side_close(harness: Harness) -> None:
    async with RemotingClient(backoff_initial=0.01) as client:
        with trio.fail_after(5):
            await client.invoke(harness.address, RemotingCommand.request(ECHO))
            first = await client.connection(harness.address)
            for conn in list(harness.server.connections):
                conn.close("test")
            while not first.closed:
                await trio.sleep(0.01)
            response = await client.invoke(harness.address, RemotingCommand.request(ECHO))
            assert response.code == ResponseCode.SUCCESS
            assert await client.connection(harness.address) is not first


async def test_connect_refused_then_backoff(nursery: trio.Nursery) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens on this port now
    async with RemotingClient(backoff_initial=10) as client:
        with trio.fail_after(5):
            for expected in ("cannot connect", "next attempt in"):
                try:
                    await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))
                except ConnectionClosedError as exc:
                    assert expected in str(exc)
                else:
                    raise AssertionError("expected a connection error")


async def test_server_calls_the_client(harness: Harness) -> None:
    """A broker calls its clients: requests from the server reach the client's dispatcher."""
    from protocol.connection import Connection, Dispatcher

    client_dispatcher = Dispatcher()

    def answer(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ext_fields={"from": "client"})

    client_dispatcher.register(40, answer)
    async with RemotingClient(client_dispatcher) as client:
        with trio.fail_after(5):
            await client.invoke(harness.address, RemotingCommand.request(ECHO))
            (server_side,) = harness.server.connections
            response = await server_side.invoke(RemotingCommand.request(40))
    assert response.ext_fields == {"from": "client"}


async def test_answers_larger_than_the_socket_buffers_arrive_whole(nursery: trio.Nursery) -> None:
    # Answers of 12 MiB in all, sent while the peer is still sending: the server's writes
    # fill the socket and must wait for room, not drop or reorder bytes.
    harness = await start_harness(nursery, "tcp")
    raw = await harness.raw()
    bodies = [bytes([n]) * (3 * 1024 * 1024) for n in range(4)]
    answers: list[RemotingCommand | None] = []

    async def send_all() -> None:
        for opaque, body in enumerate(bodies):
            await raw.send(encode(RemotingCommand(ECHO, opaque=opaque, body=body)))

    with trio.fail_after(60):
        async with trio.open_nursery() as senders:
            senders.start_soon(send_all)
            for _ in bodies:
                answers.append(await raw.receive())
    await raw.aclose()
    assert [a.opaque for a in answers if a is not None] == [0, 1, 2, 3]
    assert [a.body for a in answers if a is not None] == bodies


async def test_accept_at_the_open_file_limit_logs_one_line_and_serves_the_client_later(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    # A real EMFILE: the process's descriptors are filled up to a lowered soft limit, then a
    # client connects; trio's listener retries its accept every 0.1 s.
    harness = await start_harness(nursery, "tcp")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    caplog.set_level(logging.INFO)
    async with RemotingClient() as client:
        with trio.fail_after(5):
            await client.invoke(harness.address, RemotingCommand.request(ECHO, {}, b"warm"))
        waiting = trio.socket.socket()
        try:
            highest = max(int(name) for name in os.listdir("/proc/self/fd"))
            resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, hard))
            try:
                while True:  # fill every free number below the limit
                    fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            # Its socket exists already; the server cannot get one for the connection.
            await waiting.connect(("127.0.0.1", harness.port))
            with trio.fail_after(10):
                while not any("cannot accept" in r.getMessage() for r in caplog.records):
                    await trio.sleep(0.05)
            await trio.sleep(0.5)  # five more failed accepts: no more lines
            lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
            assert len(lines) == 1
            assert lines[0].name == "boltmq.remoting" and lines[0].exc_info is None
            assert "EMFILE" in lines[0].getMessage()
            assert f"open-file limit {highest + 1}" in lines[0].getMessage()
            assert not [r for r in caplog.records if r.name == "trio.serve_listeners"]
            accepted = harness.server.statistics().accepted_total
            for fd in fillers:
                os.close(fd)
            fillers.clear()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            # The waiting client is accepted and served: nothing was lost.
            await waiting.send(frame(ECHO, 7))
            with trio.fail_after(10):
                answer = await waiting.recv(65536)
            assert answer and harness.server.statistics().accepted_total == accepted + 1
        finally:
            for fd in fillers:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            waiting.close()


async def test_an_object_with_an_async_call_is_served_as_an_async_handler(
    harness: Harness,
) -> None:
    class Waits:
        async def __call__(self, conn: object, request: RemotingCommand) -> RemotingCommand:
            await trio.sleep(0)
            return request.response(ext_fields={"awaited": "true"})

    harness.server.dispatcher.register(4242, Waits())
    assert harness.server.dispatcher.lookup(4242) is not None
    assert harness.server.dispatcher.lookup(4242)[0]  # type: ignore[index]  # async
    async with RemotingClient() as client:
        with trio.fail_after(5):
            answer = await client.invoke(harness.address, RemotingCommand.request(4242))
            echoed = await client.invoke(harness.address, RemotingCommand.request(ECHO))
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields == {"awaited": "true"}
    assert echoed.code == ResponseCode.SUCCESS  # the connection still serves
