"""Access control compatible with RocketMQ 4.x ACL 1.0 (plain_acl.yml), for broker and registry.

Layers: `addresses` (white remote address patterns) and `accounts` (the file as plain state)
know nothing of requests; `validator` checks one request against them; `service` holds the
accounts in force, reloads the file when it changes and is the guard a server's dispatcher
runs before every handler. The signature itself is `protocol.acl`, which the clients share.
Both the broker and the registry import this package; neither imports the other.
"""

from actors.acl.accounts import Account, AclTable, Perm, load_plain_acl, parse_plain_acl
from actors.acl.addresses import AclConfigError, compile_address_pattern
from actors.acl.service import AccessValidator, AccessValidatorStatistics
from actors.acl.validator import ADMIN_CODES, AclDeniedError, check_request, required_perms

__all__ = [
    "ADMIN_CODES",
    "AccessValidator",
    "AccessValidatorStatistics",
    "Account",
    "AclConfigError",
    "AclDeniedError",
    "AclTable",
    "Perm",
    "check_request",
    "compile_address_pattern",
    "load_plain_acl",
    "parse_plain_acl",
    "required_perms",
]
