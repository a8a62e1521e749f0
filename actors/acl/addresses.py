"""White remote addresses of plain_acl.yml: which peers pass without a signature.

The patterns RocketMQ 4.x accepts (RemoteAddressStrategyFactory):

- blank: matches nobody; ``*``, ``*.*.*.*`` (or the IPv6 ``*:*:*:*:*:*:*:*``): everybody;
- one address: ``192.168.0.1`` or an IPv6 address;
- a list: ``192.168.0.1,192.168.0.2`` or ``192.168.1.{1,2,3}``;
- a range in one IPv4 part, the parts after it ``*``: ``192.168.0.*``, ``192.168.*.*``,
  ``192.168.1.1-100``, ``192.168.1-5.*``.

A bad pattern raises `AclConfigError` naming it; IPv6 ranges are not supported (say so).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

__all__ = ["AclConfigError", "AddressMatcher", "compile_address_pattern", "peer_host"]

AddressMatcher = Callable[[str], bool]


class AclConfigError(ValueError):
    """plain_acl.yml (or a setting in it) cannot be used; the message says what to fix."""


def peer_host(peer: str) -> str:
    """The host of a ``host:port`` / ``[v6]:port`` peer, without brackets."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


def compile_address_pattern(pattern: object) -> AddressMatcher:
    """A predicate on a peer host for one whiteRemoteAddress pattern."""
    text = "" if pattern is None else str(pattern).strip()
    if not text:
        return _nobody
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _everybody
    if text.endswith("}"):
        head, brace, tail = text.partition("{")
        if not brace or not head:
            raise AclConfigError(f"white address {text!r}: write a list as 192.168.1.{{1,2}}")
        return _one_of([head + item.strip() for item in tail[:-1].split(",") if item.strip()])
    if "," in text:
        return _one_of([item.strip() for item in text.split(",") if item.strip()])
    if "*" in text or "-" in text:
        return _ipv4_range(text)
    return _one_of([text])


def _nobody(host: str) -> bool:
    return False


def _everybody(host: str) -> bool:
    return True


def _normal(address: str, pattern: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise AclConfigError(
            f"white address {pattern!r}: {address!r} is not an IPv4 or IPv6 address"
        ) from None


def _one_of(addresses: list[str]) -> AddressMatcher:
    allowed = frozenset(_normal(address, ",".join(addresses)) for address in addresses)

    def match(host: str) -> bool:
        try:
            return str(ipaddress.ip_address(host)) in allowed
        except ValueError:
            return False

    return match


def _ipv4_range(text: str) -> AddressMatcher:
    if ":" in text:
        raise AclConfigError(
            f"white address {text!r}: IPv6 ranges are not supported; list the addresses"
        )
    parts = [part.strip() for part in text.split(".")]
    if len(parts) != 4:
        raise AclConfigError(f"white address {text!r}: an IPv4 pattern has four parts")
    for index, part in enumerate(parts):
        if index > 0 and (part == "*" or "-" in part):
            break
    else:
        raise AclConfigError(f"white address {text!r}: no '*' or 'a-b' range after the first part")
    fixed = parts[:index]
    if not all(_octet(part) is not None for part in fixed):
        raise AclConfigError(f"white address {text!r}: the parts before the range must be 0-255")
    if any(part != "*" for part in parts[index + 1 :]):
        raise AclConfigError(f"white address {text!r}: the parts after the range must be '*'")
    if parts[index] == "*":
        start, end = 0, 255
    else:
        low, _, high = parts[index].partition("-")
        start_octet, end_octet = _octet(low), _octet(high)
        if start_octet is None or end_octet is None or start_octet > end_octet:
            raise AclConfigError(f"white address {text!r}: a range is low-high within 0-255")
        start, end = start_octet, end_octet
    head = [int(part) for part in fixed]

    def match(host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if address.version != 4:
            return False
        octets = list(address.packed)
        return octets[:index] == head and start <= octets[index] <= end

    return match


def _octet(text: str) -> int | None:
    if not text.isdigit():
        return None
    value = int(text)
    return value if 0 <= value <= 255 else None
