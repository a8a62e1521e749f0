"""The ACL check of one request, as RocketMQ 4.x's PlainAccessValidator makes it.

In order: a peer in globalWhiteRemoteAddresses passes; otherwise the request must name an
AccessKey that plain_acl.yml knows; a peer in that account's whiteRemoteAddress passes; the
Signature must match; an admin-only request needs an admin account; and every topic or group
the request touches needs the perm (PUB, SUB) the account has on it. Plain code, no I/O.
"""

from __future__ import annotations

import hmac

from actors.acl.accounts import (
    RETRY_GROUP_TOPIC_PREFIX,
    AclTable,
    Perm,
    check_permission,
    retry_topic,
)
from protocol.acl import ACCESS_KEY, SIGNATURE, calculate_signature, request_content
from protocol.bodies import HeartbeatData
from protocol.codes import RequestCode
from protocol.command import RemotingCommand

__all__ = ["ADMIN_CODES", "AclDeniedError", "check_request", "required_perms"]

#: Requests only an admin account may make. RocketMQ 4.9's broker list, plus the registry's
#: writes (RocketMQ 4.x had no registry ACL: these are BoltMQ's choice, see docs/security.md).
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
    }
)


class AclDeniedError(Exception):
    """A refused request; the message is the remark the client gets."""


def required_perms(request: RemotingCommand) -> dict[str, Perm]:
    """The topics (and %RETRY%group resources) a request touches, with the perm each needs."""
    fields = request.ext_fields or {}
    needed: dict[str, Perm] = {}

    def need(resource: str | None, perm: Perm) -> None:
        if resource:
            needed[resource] = needed.get(resource, Perm(0)) | perm

    def need_group(group: str | None) -> None:
        if group:
            need(retry_topic(group), Perm.SUB)

    code = request.code
    if code == RequestCode.SEND_MESSAGE:
        need(fields.get("topic"), Perm.PUB)
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        need(fields.get("b") or fields.get("topic"), Perm.PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        need(fields.get("originTopic"), Perm.PUB)
        need_group(fields.get("group"))
    elif code == RequestCode.PULL_MESSAGE:
        need(fields.get("topic"), Perm.SUB)
        need_group(fields.get("consumerGroup"))
    elif code == RequestCode.QUERY_MESSAGE:
        need(fields.get("topic"), Perm.SUB)
    elif code == RequestCode.HEART_BEAT:
        if request.body:
            try:
                heartbeat = HeartbeatData.from_json(request.body)
            except Exception as exc:
                raise AclDeniedError(
                    f"cannot read the heartbeat to check its groups: {exc}"
                ) from None
            for consumer in heartbeat.consumer_data_set:
                need_group(consumer.group_name)
                for subscription in consumer.subscription_data_set:
                    need(subscription.topic, Perm.SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        need_group(fields.get("consumerGroup"))
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        need_group(fields.get("consumerGroup"))
        need(fields.get("topic"), Perm.SUB)
    return needed


def check_request(table: AclTable, request: RemotingCommand, host: str) -> None:
    """Raise `AclDeniedError` with a remark naming what is missing, or return to let it pass."""
    if table.globally_white(host):
        return
    fields = request.ext_fields or {}
    access_key = fields.get(ACCESS_KEY)
    if not access_key:
        raise AclDeniedError(
            "No accessKey is configured: the request is not signed; give the client an "
            "access key and secret key of plain_acl.yml"
        )
    account = table.accounts.get(access_key)
    if account is None:
        raise AclDeniedError(f"No acl config for {access_key}: no such accessKey in plain_acl.yml")
    if account.white_match(host):
        return
    signature = fields.get(SIGNATURE)
    if not signature:
        raise AclDeniedError(f"No signature for accessKey={access_key}: sign the request")
    expected = calculate_signature(request_content(fields, request.body), account.secret_key)
    if not hmac.compare_digest(expected, signature):
        raise AclDeniedError(
            f"Check signature failed for accessKey={access_key}: the secret key does not match"
        )
    if request.code in ADMIN_CODES and not account.admin:
        raise AclDeniedError(
            f"Need admin permission for request code={request.code} "
            f"({RequestCode(request.code).name}), but accessKey={access_key} is not admin"
        )
    if account.admin and not account.resource_perms:
        return  # an admin with no per-resource perms reaches everything, as in RocketMQ
    for resource, perm in required_perms(request).items():
        if not check_permission(perm, account.owned_perm(resource)):
            raise AclDeniedError(
                f"No {_perm_name(perm)} permission for {_resource_name(resource)} "
                f"(accessKey={access_key})"
            )


def _perm_name(perm: Perm) -> str:
    return "|".join(name for name, bit in (("PUB", Perm.PUB), ("SUB", Perm.SUB)) if perm & bit)


def _resource_name(resource: str) -> str:
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group {resource.removeprefix(RETRY_GROUP_TOPIC_PREFIX)}"
    return f"topic {resource}"
