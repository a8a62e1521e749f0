"""Subscription groups (RocketMQ's SubscriptionGroupManager), in ``config/subscriptionGroup.json``.

A group is created with RocketMQ's defaults the first time it heartbeats or pulls when
``autoCreateSubscriptionGroup`` is on; admins create, change and delete them explicitly.
"""

from __future__ import annotations

import time
from pathlib import Path

from actors.broker.persist import PersistedTable
from protocol.bodies import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper

#: Groups RocketMQ creates in every broker's table (sheet 8.4).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)


class SubscriptionGroupManager(PersistedTable):
    """Group name -> SubscriptionGroupConfig, with a data version."""

    def __init__(self, path: Path | None, auto_create: bool = True) -> None:
        super().__init__(path)
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(group_name=name) for name in SYSTEM_GROUPS
        }
        self.data_version = DataVersion(timestamp=time.time_ns() // 1_000_000, counter=0)

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when unknown and auto-create is on."""
        found = self.table.get(group)
        if found is None and self.auto_create and group:
            found = SubscriptionGroupConfig(group_name=group)
            self.update(found)
        return found

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        self.table[config.group_name] = config
        self._changed()

    def delete(self, group: str) -> bool:
        """Remove a group; False when it did not exist."""
        if self.table.pop(group, None) is None:
            return False
        self._changed()
        return True

    def _changed(self) -> None:
        self.data_version = DataVersion(
            timestamp=time.time_ns() // 1_000_000, counter=self.data_version.counter + 1
        )
        self.mark_dirty()

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
