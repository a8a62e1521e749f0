"""The ACL 1.0 request signature, shared by the servers that check it and the clients that sign.

RocketMQ 4.x signs a request this way (``AclClientRPCHook`` on the Java client, the session
credentials of the C++ client, ``PlainAccessValidator`` on the broker): take the request's ext
fields except ``Signature`` (and the ``_UNIQUE_KEY_QUERY`` flag a query adds after signing),
sort them by key, concatenate their values as UTF-8, append the body, and compute
HmacSHA1 with the secret key; the signature travels Base64-encoded in the ``Signature`` ext
field beside ``AccessKey`` (and ``SecurityToken`` when one is used).

Sans-IO: no socket or async library here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import attrs

from protocol.command import RemotingCommand

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "SessionCredentials",
    "calculate_signature",
    "request_content",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Added by a query by unique key after the header is signed, so never part of the content.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"

_UNSIGNED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})


def request_content(
    ext_fields: dict[str, str] | None, body: bytes | bytearray | memoryview | None
) -> bytes:
    """The signed bytes: ext field values sorted by key (bar the signature), then the body."""
    text = ""
    if ext_fields:
        # Java sorts keys by UTF-16 code units; every RocketMQ field name is ASCII, where
        # that order and Python's agree.
        text = "".join(ext_fields[key] for key in sorted(ext_fields) if key not in _UNSIGNED)
    content = text.encode("utf-8")
    if body:
        content += bytes(body)
    return content


def calculate_signature(content: bytes, secret_key: str) -> str:
    """Base64 of HmacSHA1(content) keyed with ``secret_key`` (RocketMQ's calSignature)."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@attrs.frozen
class SessionCredentials:
    """An account's keys; `sign` is the hook that signs every outgoing request with them."""

    access_key: str
    secret_key: str = attrs.field(repr=False)
    security_token: str | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("ACL credentials need both an access key and a secret key")

    @classmethod
    def from_options(
        cls, access_key: str | None, secret_key: str | None, security_token: str | None = None
    ) -> SessionCredentials | None:
        """Credentials from client options; None when neither key is given."""
        if not access_key and not secret_key:
            return None
        if not access_key or not secret_key:
            missing = "secret key" if access_key else "access key"
            raise ValueError(
                f"ACL credentials: the {missing} is missing; give both the access key and the "
                "secret key, or neither"
            )
        return cls(access_key, secret_key, security_token or None)

    def sign(self, request: RemotingCommand) -> None:
        """Add AccessKey (and SecurityToken) to ``request`` and sign it, in place."""
        fields = request.ext_fields
        if fields is None:
            fields = request.ext_fields = {}
        fields.pop(SIGNATURE, None)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            fields[SECURITY_TOKEN] = self.security_token
        fields[SIGNATURE] = calculate_signature(
            request_content(fields, request.body), self.secret_key
        )
