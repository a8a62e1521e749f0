"""Controller mode's requests to a broker: the controller's role notice and the epoch cache.

NOTIFY_BROKER_ROLE_CHANGED (1008, oneway from the controller leader after an election) is
queued for the controller link's task, so the connection's reader never waits on a role
change. GET_BROKER_EPOCH_CACHE (1007) answers this broker's epoch entries and commit-log end:
a broker turning slave asks its new master for them to find where their logs part, and
``boltmq admin getBrokerEpoch`` shows them.
"""

from __future__ import annotations

from actors.broker.ha.controller_mode import ControllerLink, epoch_cache
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection


class ControllerRequests:
    """Serves codes 1007 and 1008 for one broker (refused without controller mode)."""

    def __init__(self, link: ControllerLink | None) -> None:
        self.link = link

    def notify_broker_role_changed(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand | None:
        """Queue the controller's notice; answered (when not oneway) before it is acted on."""
        link = self.link
        if link is None:
            return None if request.is_oneway else _not_controller_mode(request)
        link.notify_role_changed(request)
        return None if request.is_oneway else request.response(ResponseCode.SUCCESS)

    def get_broker_epoch_cache(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """This broker's epoch entries, controller id and commit-log max offset."""
        if self.link is None:
            return _not_controller_mode(request)
        return request.response(ResponseCode.SUCCESS, body=epoch_cache(self.link).to_json())


def _not_controller_mode(request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.SYSTEM_ERROR,
        "this broker does not run in controller mode (enableControllerMode=false): it has "
        "no epoch cache and takes no role notice",
    )
