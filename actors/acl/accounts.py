"""plain_acl.yml as plain state: the accounts, their permissions and the global white list.

The file is RocketMQ 4.x's (distribution/conf/plain_acl.yml)::

    globalWhiteRemoteAddresses:
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress:
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

A group's permission is kept under its retry topic (``%RETRY%group``), as RocketMQ does, so a
request that names the retry topic is checked against the group. Parsing is all or nothing:
a bad file raises `AclConfigError` and the caller keeps what it had.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import attrs
import yaml

from actors.acl.addresses import AclConfigError, AddressMatcher, compile_address_pattern
from protocol import names

__all__ = [
    "RETRY_GROUP_TOPIC_PREFIX",
    "Account",
    "AclTable",
    "Perm",
    "check_permission",
    "load_plain_acl",
    "parse_perm",
    "parse_plain_acl",
    "retry_topic",
]

RETRY_GROUP_TOPIC_PREFIX = names.RETRY_GROUP_TOPIC_PREFIX
#: RocketMQ refuses keys of 6 characters or fewer.
KEY_MIN_LENGTH = 7


class Perm(enum.IntFlag):
    """RocketMQ's ACL permission bits (acl.common.Permission)."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERMS = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
}


def parse_perm(text: object, where: str) -> Perm:
    """DENY, PUB, SUB or PUB|SUB; absent means DENY (as in RocketMQ)."""
    if text is None:
        return Perm.DENY
    perm = _PERMS.get(str(text).replace(" ", "").upper())
    if perm is None:
        raise AclConfigError(
            f"{where}: {text!r} is not a permission; use DENY, PUB, SUB or PUB|SUB"
        )
    return perm


def check_permission(needed: int, owned: int) -> bool:
    """Whether ``owned`` grants ``needed`` (DENY wins; ANY needs PUB or SUB)."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    """``%RETRY%group``: the resource a group's permission is kept under."""
    return names.retry_topic(group)


@attrs.frozen
class Account:
    """One account of plain_acl.yml."""

    access_key: str
    secret_key: str = attrs.field(repr=False)
    white_remote_address: str
    white_match: AddressMatcher = attrs.field(repr=False, eq=False)
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    #: topic or %RETRY%group -> perm.
    resource_perms: dict[str, Perm] = attrs.field(repr=False)

    def owned_perm(self, resource: str) -> Perm:
        """The account's perm on a topic or a group's retry topic (its default when unnamed)."""
        perm = self.resource_perms.get(resource)
        if perm is not None:
            return perm
        if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.default_group_perm
        return self.default_topic_perm


@attrs.frozen
class AclTable:
    """Every account by access key, and the addresses that pass unchecked."""

    accounts: dict[str, Account]
    global_white: tuple[AddressMatcher, ...] = ()
    global_white_patterns: tuple[str, ...] = ()

    def globally_white(self, host: str) -> bool:
        """Whether ``host`` matches globalWhiteRemoteAddresses."""
        return any(match(host) for match in self.global_white)


def load_plain_acl(path: Path) -> AclTable:
    """Read and parse plain_acl.yml; raises `AclConfigError` naming the file and the fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AclConfigError(
            f"{path} does not exist: write the ACL accounts there (see docs/security.md)"
        ) from None
    except OSError as exc:
        raise AclConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise AclConfigError(f"{path}: not valid YAML ({detail})") from None
    try:
        return parse_plain_acl(data)
    except AclConfigError as exc:
        raise AclConfigError(f"{path}: {exc}") from None


def parse_plain_acl(data: Any) -> AclTable:
    """An `AclTable` from the loaded YAML document."""
    if not isinstance(data, dict):
        raise AclConfigError("expected a mapping with 'accounts' (and globalWhiteRemoteAddresses)")
    patterns = _string_list(data.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
    global_white = tuple(compile_address_pattern(pattern) for pattern in patterns)
    raw_accounts = data.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise AclConfigError("'accounts' must be a list of accounts")
    accounts: dict[str, Account] = {}
    for number, raw in enumerate(raw_accounts, 1):
        account = _account(raw, number)
        if account.access_key in accounts:
            raise AclConfigError(f"accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclTable(accounts, global_white, tuple(patterns))


def _account(raw: Any, number: int) -> Account:
    where = f"account {number}"
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where}: expected accessKey, secretKey, ... under '- '")
    access_key = "" if raw.get("accessKey") is None else str(raw["accessKey"])
    secret_key = "" if raw.get("secretKey") is None else str(raw["secretKey"])
    if len(access_key) < KEY_MIN_LENGTH or len(secret_key) < KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{where} ({access_key or 'no accessKey'}): accessKey and secretKey need at least "
            f"{KEY_MIN_LENGTH} characters each"
        )
    where = f"account {access_key}"
    white = "" if raw.get("whiteRemoteAddress") is None else str(raw["whiteRemoteAddress"])
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}: admin must be true or false, not {admin!r}")
    perms: dict[str, Perm] = {}
    for key, is_group in (("topicPerms", False), ("groupPerms", True)):
        for item in _string_list(raw.get(key), f"{where} {key}"):
            name, sep, perm = item.partition("=")
            if not sep or not name.strip():
                raise AclConfigError(f"{where} {key}: {item!r} is not name=PERM")
            resource = retry_topic(name.strip()) if is_group else name.strip()
            perms[resource] = parse_perm(perm.strip(), f"{where} {key} {name.strip()}")
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=white,
        white_match=compile_address_pattern(white),
        admin=admin,
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm"), f"{where} defaultTopicPerm"),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm"), f"{where} defaultGroupPerm"),
        resource_perms=perms,
    )


def _string_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{where} must be a list ('- item' lines)")
    return [str(item) for item in value if item is not None]
