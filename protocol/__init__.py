"""RocketMQ 4.x remoting protocol: codes, commands, frames, headers, bodies, messages, transports.

Layers, bottom up (each usable without the ones above it):

- `protocol.codes`, `protocol.command`: the vocabulary (`RequestCode`, `ResponseCode`,
  `RemotingCommand`, `RemotingError`).
- `protocol.frame`: sans-IO frame codec (bytes <-> commands), JSON and ROCKETMQ headers.
- `protocol.headers`, `protocol.bodies`, `protocol.message`: typed ext-field headers, JSON
  bodies, and the stored message record format.
- `protocol.connection`: `Dispatcher` and `Connection` (request dispatch, pending calls).
- `protocol.server`, `protocol.client`: `RemotingServer` over TCP and websocket, and the
  pooled `RemotingClient` (trio or asyncio).
"""

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
]
