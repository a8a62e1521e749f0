"""Where a push consumer keeps its progress: on the brokers (clustering) or in a file (broadcast).

Both stores hold the latest offset per queue in memory (`update`), read a queue's stored
offset when the queue is first assigned (`read_stored`), and write every assigned queue's
offset out every 5 s and on shutdown (`persist`). Offsets are "next offset to consume".

- `RemoteOffsetStore` (RocketMQ's RemoteBrokerOffsetStore): QUERY_CONSUMER_OFFSET and
  UPDATE_CONSUMER_OFFSET at the queue's broker, the master when it is up, a slave of the
  same broker name while it is not.
- `LocalFileOffsetStore` (LocalFileOffsetStore): one JSON file per consumer group,
  ``<dir>/<ip>@<instance name>/<group>/offsets.json`` in RocketMQ's OffsetSerializeWrapper
  form, replaced atomically (tmp + fsync + rename, previous copy kept as ``.bak``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import anyio

from client.instance import ClientInstance
from client.message import MQClientError
from protocol.bodies import BodyError, MessageQueue, ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    UpdateConsumerOffsetRequestHeader,
    encode_header,
)
from supervisors.config_file import ConfigFileError, load_json_config, save_json_config

log = logging.getLogger("boltmq.client")


class OffsetStore(Protocol):
    """What a push consumer needs from an offset store."""

    async def load(self) -> None:
        """Read what the store keeps before the first rebalance."""

    async def read_stored(self, queue: MessageQueue) -> int | None:
        """The stored offset of ``queue``; None when the group has none (then consumeFromWhere)."""

    def read(self, queue: MessageQueue) -> int | None:
        """The offset held in memory for ``queue``."""

    def update(self, queue: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Remember ``offset`` as ``queue``'s progress (persisted later)."""

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Write the offsets of ``queues`` out."""

    def remove(self, queue: MessageQueue) -> None:
        """Forget ``queue`` (it is no longer assigned)."""


class _MemoryTable:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def read(self, queue: MessageQueue) -> int | None:
        """The offset held in memory for ``queue``."""
        return self.offsets.get(queue)

    def update(self, queue: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Remember ``offset``; with ``increase_only`` a lower offset is ignored."""
        current = self.offsets.get(queue)
        if current is None or not increase_only or offset > current:
            self.offsets[queue] = offset

    def remove(self, queue: MessageQueue) -> None:
        """Forget ``queue``."""
        self.offsets.pop(queue, None)


class RemoteOffsetStore(_MemoryTable):
    """A clustering group's offsets, kept by the brokers."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        #: Queue -> (offset, broker address) last stored. The address is part of it: a commit
        #: follows the queue's master when it moves (an election makes a slave the master,
        #: whose copy of the offsets may be a few seconds old), even if the offset did not.
        self._persisted: dict[MessageQueue, tuple[int, str | None]] = {}

    async def load(self) -> None:
        """Nothing to load: each queue's offset is asked for when it is assigned."""

    async def read_stored(self, queue: MessageQueue) -> int | None:
        """QUERY_CONSUMER_OFFSET; None when the broker has no offset for the group."""
        offset = await self.instance.query_consumer_offset(self.group, queue)
        if offset is not None:
            found = self.instance.read_address(queue.broker_name)
            self._persisted[queue] = (offset, None if found is None else found[0])
        return offset

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        """UPDATE_CONSUMER_OFFSET for each of ``queues`` whose offset moved since last time,
        or whose broker's master (or the slave read from) is another broker than last time."""
        for queue in list(queues):
            offset = self.offsets.get(queue)
            if offset is None:
                continue
            found = self.instance.read_address(queue.broker_name)
            address = None if found is None else found[0]
            persisted = self._persisted.get(queue)
            if persisted is not None and persisted[0] == offset and address in (None, persisted[1]):
                continue  # unchanged, at the same broker or with no broker in the route now
            header = UpdateConsumerOffsetRequestHeader(
                consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id,
                commit_offset=offset,
            )  # fmt: skip
            try:
                request = RemotingCommand.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)
                )
                response = await self.instance.invoke_for_queue(queue, request, address=address)
            except RemotingError as exc:
                log.warning("commit of offset %d for %s failed: %s", offset, queue, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("commit of offset %d for %s refused: %s", offset, queue,
                            response.remark)  # fmt: skip
                continue
            self._persisted[queue] = (offset, address)

    def remove(self, queue: MessageQueue) -> None:
        """Forget ``queue``."""
        super().remove(queue)
        self._persisted.pop(queue, None)


class LocalFileOffsetStore(_MemoryTable):
    """A broadcasting consumer's offsets, in a JSON file of its own."""

    def __init__(self, directory: str | Path, client_name: str, group: str) -> None:
        super().__init__()
        self.path = Path(directory).expanduser() / client_name / group / "offsets.json"
        self._stored: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        """Read the file (or its backup); a file that cannot be read at all is an error."""
        try:
            body = await anyio.to_thread.run_sync(
                load_json_config, self.path, ResetOffsetBody.from_json
            )
        except (ConfigFileError, BodyError) as exc:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"offset file: {exc}") from exc
        if body is not None:
            self._stored = dict(body.offset_table)
            self.offsets.update(body.offset_table)

    async def read_stored(self, queue: MessageQueue) -> int | None:
        """The offset the file had for ``queue``, None when it had none."""
        return self._stored.get(queue)

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Write the offsets of ``queues`` (and keep the others the file had)."""
        table = dict(self._stored)
        for queue in queues:
            offset = self.offsets.get(queue)
            if offset is not None:
                table[queue] = offset
        if table == self._stored and self.path.exists():
            return
        data = ResetOffsetBody(offset_table=table).to_json()
        try:
            await anyio.to_thread.run_sync(save_json_config, self.path, data)
        except OSError as exc:
            log.warning("writing the offset file %s failed: %s", self.path, exc)
            return
        self._stored = table
