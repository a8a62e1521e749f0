"""`boltmq web`: its static responder in-process, and its refusals of bad options.

Loopback only, port 0; every wait has a deadline. The page itself runs in Chromium in
tests/interop/test_browser.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import trio

from boltmq.cli.web import StaticSite, default_root

ROOT = Path(__file__).resolve().parents[3]


async def _get(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *fields = head.decode().split("\r\n")
    headers = dict(field.split(": ", 1) for field in fields)
    return status, headers, body


@pytest.fixture
async def site_port(nursery: trio.Nursery) -> int:
    root = default_root()
    assert root is not None
    site = StaticSite(root.resolve(), {"namesrvAddr": "ws://127.0.0.1:9877/"})
    port: int = await nursery.start(site.serve, 0, "127.0.0.1")
    return port


async def test_serves_the_page_the_module_and_the_config(site_port: int) -> None:
    status, headers, body = await _get(site_port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == "HTTP/1.1 200 OK" and headers["Content-Type"].startswith("text/html")
    assert b'import { BoltMQClient } from "./boltmq.js"' in body
    status, headers, body = await _get(site_port, b"GET /boltmq.js HTTP/1.1\r\n\r\n")
    # Browsers run module scripts only when served with a JavaScript type.
    assert headers["Content-Type"].startswith("text/javascript")
    size = (ROOT / "web" / "boltmq.js").stat().st_size
    assert int(headers["Content-Length"]) == len(body) == size
    status, headers, body = await _get(site_port, b"GET /config.json?x=1 HTTP/1.1\r\n\r\n")
    assert orjson.loads(body) == {"namesrvAddr": "ws://127.0.0.1:9877/"}
    status, headers, body = await _get(site_port, b"HEAD /boltmq.js HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 200 OK" and body == b"" and int(headers["Content-Length"]) > 0


async def test_refuses_what_it_does_not_serve(site_port: int) -> None:
    status, _, body = await _get(site_port, b"GET /../../etc/passwd HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 404 Not Found" and b"not found" in body
    status, _, _ = await _get(site_port, b"GET /%2e%2e/pyproject.toml HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 404 Not Found"
    status, _, body = await _get(site_port, b"POST / HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 405 Method Not Allowed" and b"use GET" in body
    status, _, _ = await _get(site_port, b"nonsense\r\n\r\n")
    assert status == "HTTP/1.1 400 Bad Request"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--namesrvAddr", "127.0.0.1:9876"], "is not a ws:// or wss:// address"),
        (["--root", "/nonexistent-web-root"], "no index.html in /nonexistent-web-root"),
        (["--port", "70000"], "--port 70000 is not a port"),
    ],
)
def test_bad_options_get_one_clear_line(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "web", *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_help_has_an_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "web", "--help"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "example:\n  boltmq web --port 8080" in done.stdout
