"""ACL for gRPC calls: the v2 signature of each call, then the account's permissions.

An official 5.x client with credentials signs every call in its metadata::

    authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                   Signature=<hex of HmacSHA1(secretKey, value of x-mq-date-time)>

`ProxyAcl.check` verifies that signature against the account's secret key, then asks the
account for the topics and groups the call touches (a send needs PUB on its topic, a receive
SUB on its topic and group, a route lookup either). A bad or missing signature answers
UNAUTHORIZED, a missing permission FORBIDDEN, each with a message naming what to fix.

The accounts are plain_acl.yml's, read and kept by the project's ACL code; the proxy sees
them through `AccountBook` (built by the command line, which may import the servers' parts),
so the rules live in one place.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from hashlib import sha1
from typing import Any, Literal, Protocol

import attrs

from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy.runtime import Context, metadata
from proxy.status import Code, ProxyError

__all__ = ["AccountBook", "AccountView", "Need", "ProxyAcl", "needs_of", "peer_host", "sign"]

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
_FIELD = re.compile(r"\s*(\w+)\s*=\s*([^,\s]*)\s*")


@attrs.frozen
class Need:
    """One permission a call needs: PUB, SUB or ANY (either) on a topic or a group."""

    kind: Literal["topic", "group"]
    name: str
    perm: Literal["PUB", "SUB", "ANY"]


class AccountView(Protocol):
    """One account, as the proxy asks about it."""

    @property
    def secret_key(self) -> str:
        """The account's secret key."""
        ...

    def white(self, host: str) -> bool:
        """Whether calls from ``host`` pass unsigned (the account's whiteRemoteAddress)."""
        ...

    def permits(self, need: Need) -> bool:
        """Whether the account has ``need``."""
        ...


class AccountBook(Protocol):
    """The ACL accounts in force."""

    def globally_white(self, host: str) -> bool:
        """Whether ``host`` passes unchecked (globalWhiteRemoteAddresses)."""
        ...

    def account(self, access_key: str) -> AccountView | None:
        """The account of ``access_key``, or None."""
        ...


def sign(secret_key: str, date_time: str) -> str:
    """The v2 signature: lower-case hex of HmacSHA1(secret key, x-mq-date-time's value)."""
    return hmac.new(secret_key.encode(), date_time.encode(), sha1).hexdigest()


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest or peer


class ProxyAcl:
    """Checks calls against an `AccountBook`."""

    def __init__(self, book: AccountBook) -> None:
        self.book = book
        self.refused = 0

    def check(self, rpc: str, request: Any, context: Context) -> None:
        """Return when the call may go on; `ProxyError` UNAUTHORIZED or FORBIDDEN otherwise."""
        try:
            self._check(rpc, request, context)
        except ProxyError:
            self.refused += 1
            raise

    def _check(self, rpc: str, request: Any, context: Context) -> None:
        host = peer_host(context.peer())
        if self.book.globally_white(host):
            return
        meta = metadata(context)
        header = meta.get(AUTHORIZATION, "")
        if not header:
            raise ProxyError(
                Code.UNAUTHORIZED,
                "the call is not signed: give the client the access key and secret key of an "
                "account in plain_acl.yml",
            )
        algorithm, _, rest = header.strip().partition(" ")
        fields = {m.group(1): m.group(2) for m in _FIELD.finditer(rest.replace(",", " , "))}
        access_key = fields.get("Credential", "").split("/")[0]
        if algorithm != ALGORITHM or not access_key or "Signature" not in fields:
            raise ProxyError(
                Code.UNAUTHORIZED,
                f"authorization {header[:60]!r} is not '{ALGORITHM} Credential=..., "
                "SignedHeaders=x-mq-date-time, Signature=...'",
            )
        account = self.book.account(access_key)
        if account is None:
            raise ProxyError(
                Code.UNAUTHORIZED, f"no account for accessKey={access_key} in plain_acl.yml"
            )
        if account.white(host):
            return
        expected = sign(account.secret_key, meta.get(DATE_TIME, ""))
        if not hmac.compare_digest(expected, fields["Signature"].lower()):
            raise ProxyError(
                Code.UNAUTHORIZED,
                f"signature check failed for accessKey={access_key}: the secret key does not match",
            )
        for need in needs_of(rpc, request):
            if not account.permits(need):
                raise ProxyError(
                    Code.FORBIDDEN,
                    f"accessKey={access_key} has no {need.perm} permission on {need.kind} "
                    f"{need.name}",
                )


def needs_of(rpc: str, request: Any) -> Sequence[Need]:
    """The permissions ``rpc`` needs for ``request`` (none beyond the signature for most)."""
    needs: list[Need] = []

    def topic(resource: pb.Resource, perm: Literal["PUB", "SUB", "ANY"]) -> None:
        if resource.name:
            needs.append(Need("topic", resource.name, perm))

    def group(resource: pb.Resource) -> None:
        if resource.name:
            needs.append(Need("group", resource.name, "SUB"))

    if rpc == "QueryRoute":
        topic(request.topic, "ANY")
    elif rpc == "SendMessage":
        for name in sorted({m.topic.name for m in request.messages}):
            topic(pb.Resource(name=name), "PUB")
    elif rpc in ("EndTransaction", "RecallMessage"):
        topic(request.topic, "PUB")
    elif rpc == "Heartbeat":
        if request.HasField("group"):
            group(request.group)
    elif rpc in ("ReceiveMessage", "PullMessage", "UpdateOffset", "GetOffset"):
        group(request.group)
        topic(request.message_queue.topic, "SUB")
    elif rpc in (
        "AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
        "QueryAssignment", "SyncLiteSubscription",
    ):  # fmt: skip
        group(request.group)
        topic(request.topic, "SUB")
    elif rpc == "QueryOffset":
        topic(request.message_queue.topic, "SUB")
    return needs
