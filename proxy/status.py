"""The v2 ``Status`` of every answer: our errors and the brokers' response codes as v2 Codes.

A gRPC call of MessagingService always completes with gRPC status OK; success or failure is
the ``status`` field of its answer (Code and message), which the official clients check. The
mapping of remoting response codes follows RocketMQ's proxy where it names one (SUCCESS,
SYSTEM_BUSY, REQUEST_CODE_NOT_SUPPORTED, SUBSCRIPTION_GROUP_NOT_EXIST) and is completed here
for the codes our brokers answer that it leaves to INTERNAL_SERVER_ERROR; a client that gets
TOPIC_NOT_FOUND instead of an internal error knows what to fix.
"""

from __future__ import annotations

from protocol.codes import ResponseCode
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb

__all__ = ["ProxyError", "from_response_code", "ok", "status"]

Code = pb.Code


class ProxyError(Exception):
    """A refusal with the v2 Code the client gets and a message a person can act on."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> pb.Status:
        """This refusal as the ``status`` of an answer."""
        return status(self.code, self.message)


def status(code: pb.Code, message: str | None = None) -> pb.Status:
    """A v2 Status; the message defaults to the Code's name, as the clients print it."""
    return pb.Status(code=code, message=message if message else pb.Code.Name(code))


def ok() -> pb.Status:
    """Status OK."""
    return status(pb.OK)


_BY_RESPONSE_CODE: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: pb.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
    ResponseCode.VERSION_NOT_SUPPORTED: pb.VERSION_UNSUPPORTED,
}


def from_response_code(code: int, remark: str | None = None) -> pb.Status:
    """The v2 Status for a broker's or registry's remoting response code and remark."""
    mapped = _BY_RESPONSE_CODE.get(code, pb.INTERNAL_SERVER_ERROR)
    return status(mapped, remark or f"response code {code}")
