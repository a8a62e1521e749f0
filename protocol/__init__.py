"""RocketMQ 4.x remoting protocol: codes, commands, frames, headers, bodies, messages, transports.

Layers, bottom up (each usable without the ones above it):

- `protocol.codes`, `protocol.command`: the vocabulary (`RequestCode`, `ResponseCode`,
  `RemotingCommand`, `RemotingError`).
- `protocol.frame`: sans-IO frame codec (bytes <-> commands), JSON and ROCKETMQ headers;
  `protocol.fastjson`: fastjson's JSON dialect (bare and object map keys).
- `protocol.headers`, `protocol.bodies`: typed ext-field headers and JSON bodies, each a
  package of private modules by request family that exports every name itself.
- `protocol.message`: the message codec, a package too: the stored record (also a pull
  answer's body), batch bodies, properties, offset msg ids and UNIQ_KEY ids.
- `protocol.connection`: `Dispatcher` and `Connection` (request dispatch, pending calls).
- `protocol.transport`, `protocol.websocket`: thin TCP and websocket transports.
- `protocol.server`, `protocol.client`: `RemotingServer` over TCP and websocket, and the
  pooled `RemotingClient` (trio or asyncio).

`codecs_status` says whether the compiled codecs (``protocol/_speedups.pyx``) or the pure-Python
ones run, and why.
"""

# First: it decides, before any codec imports it, whether the compiled module may load.
from protocol._codecs import codecs_status
from protocol.client import RemotingClient
from protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from protocol.command import (
    ConnectionClosedError,
    RemotingCommand,
    RemotingError,
    RemotingTimeoutError,
)
from protocol.connection import Connection, Dispatcher
from protocol.frame import DEFAULT_FRAME_LIMIT, FrameDecoder, FrameError, FrameTooLargeError
from protocol.server import RemotingServer, ServerConfig

__all__ = [
    "DEFAULT_FRAME_LIMIT",
    "Connection",
    "ConnectionClosedError",
    "Dispatcher",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "ServerConfig",
    "codecs_status",
]
