"""What a slave's config sync asks its master for besides the admin tables.

GET_ALL_DELAY_OFFSET answers the delay levels' progress (`delayOffset.json`), which the slave
keeps so that, once promoted by an operator, it does not deliver delayed messages again.
"""

from __future__ import annotations

from actors.broker.tables.delay_offsets import DelayOffsetTable
from protocol.command import RemotingCommand
from protocol.connection import Connection


class ReplicationQueries:
    """Handler of GET_ALL_DELAY_OFFSET."""

    def __init__(self, delay_offsets: DelayOffsetTable) -> None:
        self.delay_offsets = delay_offsets

    def get_all_delay_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET: the delay levels' offsets in ``delayOffset.json``'s form."""
        return request.response(body=self.delay_offsets.to_json())
