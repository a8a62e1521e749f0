"""Subscription groups (RocketMQ's SubscriptionGroupManager), in ``config/subscriptionGroup.json``.

A group is created with RocketMQ's defaults the first time it heartbeats, pulls, sends back or
locks when ``autoCreateSubscriptionGroup`` is on; admins create, change and delete them
explicitly. `SubscriptionGroupTable` is the plain state; `SubscriptionGroupManager` the actor
that alone changes it. Lookups read the table inline; an unknown group is created by a cast
(the lookup answers the default config the actor creates), admin changes and the HA config
sync are calls.

A restart of the actor keeps the table (it lives on the instance, each change applied whole):
it loses the command that crashed it and those queued behind it; a lost auto-creation is cast
again by the group's next lookup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import attrs

from actors.broker.tables.table_actor import TableActor
from protocol.bodies import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper
from protocol.names import BROKER_SYSTEM_GROUPS
from supervisors.actor import ActorError, ActorStatistics, Request

log = logging.getLogger("boltmq.broker")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SubscriptionGroupTable:
    """Group name -> SubscriptionGroupConfig, with a data version; plain state, no I/O.

    Times (``now_ms``, wall-clock epoch milliseconds) come from the caller. `version` counts
    every change, the file's cue to be written.
    """

    def __init__(self, now_ms: int) -> None:
        self.table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(group_name=name) for name in BROKER_SYSTEM_GROUPS
        }
        self.data_version = DataVersion(timestamp=now_ms, counter=0)
        self.version = 0

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, or None."""
        return self.table.get(group)

    def auto_create(self, group: str, now_ms: int) -> SubscriptionGroupConfig:
        """The group's config, created with RocketMQ's defaults when it is unknown."""
        found = self.table.get(group)
        if found is None:
            found = SubscriptionGroupConfig(group_name=group)
            self.update(found, now_ms)
        return found

    def update(self, config: SubscriptionGroupConfig, now_ms: int) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        self.table[config.group_name] = config
        self._changed(now_ms)

    def delete(self, group: str, now_ms: int) -> bool:
        """Remove a group; False when it did not exist."""
        if self.table.pop(group, None) is None:
            return False
        self._changed(now_ms)
        return True

    def replace(self, wrapper: SubscriptionGroupWrapper) -> bool:
        """Take another broker's whole table and data version (a slave's config sync) when
        its data version differs from ours; True when replaced."""
        if wrapper.data_version == self.data_version:
            return False
        self.table.clear()
        self.table.update(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version
        self.version += 1
        return True

    def _changed(self, now_ms: int) -> None:
        self.data_version = DataVersion(timestamp=now_ms, counter=self.data_version.counter + 1)
        self.version += 1

    def to_json(self) -> bytes:
        """subscriptionGroup.json."""
        return SubscriptionGroupWrapper(
            subscription_group_table=dict(self.table), data_version=self.data_version
        ).to_json()

    def from_json(self, data: bytes) -> None:
        """Load subscriptionGroup.json."""
        wrapper = SubscriptionGroupWrapper.from_json(data)
        self.table.update(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version


# -- commands ----------------------------------------------------------------------------------


@attrs.frozen
class AutoCreateGroup:
    """An unknown group was looked up with auto-create on: create it with defaults (a cast)."""

    group: str


@attrs.frozen
class UpdateGroup(Request[None]):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""

    config: SubscriptionGroupConfig


@attrs.frozen
class DeleteGroup(Request[bool]):
    """DELETE_SUBSCRIPTIONGROUP; answers whether the group existed."""

    group: str


@attrs.frozen
class ReplaceGroupTable(Request[bool]):
    """A slave's config sync: the master's groups, taken when their data version differs."""

    wrapper: SubscriptionGroupWrapper


GroupCommand: TypeAlias = AutoCreateGroup | UpdateGroup | DeleteGroup | ReplaceGroupTable


@attrs.frozen
class SubscriptionGroupStatistics(ActorStatistics):
    """The group actor's counters and its table at one moment."""

    groups: int
    data_version: int  # the data version's counter
    file_writes: int
    file_errors: int


class SubscriptionGroupManager(TableActor[GroupCommand]):
    """Owns the broker's `SubscriptionGroupTable`; see the module docstring."""

    def __init__(self, path: Path | None, auto_create: bool = True) -> None:
        self.state = SubscriptionGroupTable(_now_ms())
        super().__init__("groups", self.state, path)
        #: ``autoCreateSubscriptionGroup``, a setting UPDATE_BROKER_CONFIG may change.
        self.auto_create = auto_create

    # -- reads (inline, no hop) -------------------------------------------------------------

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config. An unknown group, when auto-create is on, is created by a cast
        and answered with the default config the actor creates."""
        found = self.state.table.get(group)
        if found is None and self.auto_create and group:
            found = SubscriptionGroupConfig(group_name=group)
            try:
                self.cast_nowait(AutoCreateGroup(group))
            except ActorError as exc:
                log.warning("group %s not created now (%s); its next lookup asks again", group, exc)
        return found

    def to_json(self) -> bytes:
        """subscriptionGroup.json, as GET_ALL_SUBSCRIPTIONGROUP_CONFIG answers it."""
        return self.state.to_json()

    @property
    def data_version(self) -> DataVersion:
        """The table's data version."""
        return self.state.data_version

    @property
    def table(self) -> Mapping[str, SubscriptionGroupConfig]:
        """Group name -> config."""
        return self.state.table

    # -- the actor --------------------------------------------------------------------------

    def apply(self, command: GroupCommand) -> Any:
        """Apply one command."""
        table = self.state
        match command:
            case AutoCreateGroup():
                table.auto_create(command.group, _now_ms())
                return None
            case UpdateGroup():
                table.update(command.config, _now_ms())
                return None
            case DeleteGroup():
                return table.delete(command.group, _now_ms())
            case ReplaceGroupTable():
                return table.replace(command.wrapper)
        raise TypeError(f"the group actor takes no {type(command).__name__}")

    def statistics(self) -> SubscriptionGroupStatistics:
        """Actor counters, table size and file writes."""
        return SubscriptionGroupStatistics(
            **self._statistics_fields(),
            groups=len(self.state.table),
            data_version=self.state.data_version.counter,
            file_writes=self.file_writes,
            file_errors=self.file_errors,
        )
