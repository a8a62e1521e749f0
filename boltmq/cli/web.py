"""``boltmq web``: serves the browser client (web/boltmq.js) and its example page.

A small static responder on trio (GET and HEAD only, one request per connection) plus
``/config.json``, which tells the page the registry's websocket address. The page then talks
to the cluster itself, over websocket; this server never touches a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial
from pathlib import Path
from urllib.parse import unquote, urlsplit

import trio

from boltmq.cli._argtypes import add_namesrv_argument
from boltmq.cli._run import EXIT_USAGE, Runner, serve
from supervisors.supervisor import ChildSpec

log = logging.getLogger("boltmq.web")

HELP = "serve the browser client and its example page (send and watch messages over websocket)"
EXAMPLE = """example:
  boltmq web --port 8080 -n ws://127.0.0.1:9877/
  # then open http://127.0.0.1:8080/ (a default `boltmq cluster` listens on ws port 9877)"""

DEFAULT_PORT = 8080
DEFAULT_NAMESRV = "ws://127.0.0.1:9877/"
#: Request heads longer than this are refused (a browser's GET is far smaller).
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",  # module scripts need a JavaScript type
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


def default_root() -> Path | None:
    """The web/ directory: packaged beside this package, or at the top of a source checkout."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "web", here.parents[2] / "web"):
        if (candidate / "boltmq.js").is_file():
            return candidate
    return None


def setup(parser: argparse.ArgumentParser) -> Runner:
    """Add ``--port``, ``--bindAddress``, ``--namesrvAddr`` and ``--root``."""
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"HTTP port ({DEFAULT_PORT}; 0 picks a free one)")  # fmt: skip
    parser.add_argument("--bindAddress", default="127.0.0.1", help="address to listen on")
    add_namesrv_argument(
        parser, dest="namesrvAddr", default=DEFAULT_NAMESRV, metavar="ws://HOST:PORT/",
        help=f"the registry's websocket address the page starts with ({DEFAULT_NAMESRV})",
    )  # fmt: skip
    parser.add_argument("--root", help="directory to serve (default: the project's web/)")

    def run(args: argparse.Namespace) -> int:
        root = Path(args.root).expanduser() if args.root else default_root()
        if root is None or not (root / "index.html").is_file():
            where = root or "the installed package or the source tree"
            print(f"{parser.prog}: no index.html in {where}; give --root DIR (the project's "
                  "web/ directory)", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        if not args.namesrvAddr.startswith(("ws://", "wss://")):
            print(f"{parser.prog}: --namesrvAddr {args.namesrvAddr} is not a ws:// or wss:// "
                  "address; a browser reaches the registry over websocket only",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        if not 0 <= args.port <= 65535:
            print(f"{parser.prog}: --port {args.port} is not a port (0-65535)", file=sys.stderr)
            return EXIT_USAGE
        site = StaticSite(root.resolve(), {"namesrvAddr": args.namesrvAddr})
        serve_site = partial(site.serve, args.port, args.bindAddress)
        return serve("web", [ChildSpec.function("web", serve_site)])

    return run


class StaticSite:
    """Files under ``root`` and a generated ``/config.json``, over HTTP/1.1 on trio."""

    def __init__(self, root: Path, config: dict[str, str]) -> None:
        self.root = root
        self.config_json = json.dumps(config).encode()

    async def serve(
        self, port: int, host: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen until cancelled; reports the bound port."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        log.info("web: serving %s on http://%s:%d/ (registry %s)",
                 self.root, host, bound, json.loads(self.config_json)["namesrvAddr"])  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(bound)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                head = await self._read_head(stream)
                if head is None:
                    return
                status, content_type, body, method = await self._answer(head)
                await stream.send_all(_response(status, content_type, body, method == "HEAD"))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _read_head(self, stream: trio.SocketStream) -> bytes | None:
        data = bytearray()
        with trio.move_on_after(HEAD_TIMEOUT):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return None
                data += chunk
                if len(data) > MAX_HEAD:
                    await stream.send_all(_response(431, "text/plain", b"request head too large\n"))
                    return None
            return bytes(data)
        return None

    async def _answer(self, head: bytes) -> tuple[int, str, bytes, str]:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3:
            return 400, "text/plain", b"bad request line\n", "GET"
        method, target, _version = parts
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", f"{method} is not served; use GET\n".encode(), method
        path = unquote(urlsplit(target).path)
        if path == "/config.json":
            return 200, CONTENT_TYPES[".json"], self.config_json, method
        file = (self.root / path.lstrip("/")).resolve()
        if file.is_dir():
            file = file / "index.html"
        if not file.is_relative_to(self.root) or not file.is_file():
            log.info("web: %s %s: not found", method, path)
            return 404, "text/plain", f"{path} not found\n".encode(), method
        body = await trio.Path(file).read_bytes()
        log.debug("web: %s %s: %d bytes", method, path, len(body))
        content_type = CONTENT_TYPES.get(file.suffix, "application/octet-stream")
        return 200, content_type, body, method


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large"}  # fmt: skip


def _response(status: int, content_type: str, body: bytes, head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    ).encode()
    return head if head_only else head + body
