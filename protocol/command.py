"""`RemotingCommand`, the unit every frame carries, and the error type that maps to a response."""

from __future__ import annotations

import itertools
from typing import Any

from protocol.codes import (
    CURRENT_VERSION,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    """A process-wide request id, wrapping inside the signed 32-bit range Java uses."""
    return next(_opaque_counter) & 0x7FFFFFFF


class RemotingCommand:
    """One request or response: header fields, string ext fields and an optional body.

    A plain slotted class rather than attrs: it is built and read once per request on the hot
    path, and a hand-written ``__init__`` with defaults is the cheapest construction Python has.
    """

    __slots__ = (
        "body",
        "code",
        "ext_fields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        *,
        opaque: int = 0,
        flag: int = 0,
        language: LanguageCode = LanguageCode.JAVA,
        version: int = CURRENT_VERSION,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview | None = None,
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A new request with a fresh opaque."""
        return cls(
            code,
            opaque=next_opaque(),
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields=ext_fields,
            body=body,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview | None = None,
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response bit set."""
        return RemotingCommand(
            code,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        """True for a response, False for a request."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """True for a request that must not be answered."""
        return bool(self.flag & ONEWAY_FLAG)

    def field(self, name: str, default: str | None = None) -> str | None:
        """One ext field, or ``default`` when absent."""
        ext = self.ext_fields
        if ext is None:
            return default
        return ext.get(name, default)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        body_len = 0 if self.body is None else len(self.body)
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} "
            f"remark={self.remark!r} ext={self.ext_fields!r} body={body_len}B)"
        )

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


class RemotingError(Exception):
    """A failure with the RocketMQ response code the remoting layer answers with."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark

    def __str__(self) -> str:
        try:
            name = ResponseCode(self.code).name
        except ValueError:
            name = str(self.code)
        return f"{name}: {self.remark}"


class RemotingTimeoutError(RemotingError):
    """No response arrived before the caller's deadline."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, remark)


class ConnectionClosedError(RemotingError):
    """The connection closed (or could not be opened) before a response arrived."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, remark)
