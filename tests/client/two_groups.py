"""Two broker groups of one master each behind one registry, in processes of their own:
`boltmq cluster` (the registry and broker-a) and a `boltmq broker` (broker-b) registered with
it. Both create topics on a send from TBW102, as a fresh cluster does.

Loopback only, ephemeral ports, stores in the test's temporary directory; the fixture returns
once the registry routes TBW102 to both brokers, so a producer sees both from its first send.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from client import Admin
from tests.support.waiting import wait_until

from .helpers import BoltProcess

BROKERS = ("broker-a", "broker-b")
STORE_ARGS = ("--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
              "--mapedFileSizeCommitLog", str(16 << 20))  # fmt: skip


class TwoBrokerGroups:
    """broker-a (with the registry) and broker-b; `stop` ends both."""

    def __init__(self, home: Path) -> None:
        home_a, home_b = home / "a", home / "b"
        self.a = BoltProcess(
            home_a, "cluster", "--home", str(home_a), "--registryPort", "0", "--listenPort", "0",
            "--brokerName", "broker-a", *STORE_ARGS,
        )  # fmt: skip
        try:
            self.b = BoltProcess(
                home_b, "broker", "-n", self.a.registry, "--listenPort", "0",
                "--brokerName", "broker-b", "--storePathRootDir", str(home_b / "store"),
                *STORE_ARGS,
            )  # fmt: skip
        except BaseException:
            self.a.stop()
            raise

    @property
    def namesrv(self) -> str:
        """The registry address to give clients."""
        return self.a.registry

    def stop(self) -> None:
        """Stop broker-b, then the cluster."""
        self.b.stop()
        self.a.stop()


async def routes_to(namesrv: str, topic: str, brokers: tuple[str, ...] = BROKERS) -> None:
    """Wait until the registry routes ``topic`` to ``brokers`` (both, unless told), no other."""
    async with Admin(namesrv_addr=namesrv) as admin:

        async def routed() -> bool:
            route = await admin.instance.fetch_route(topic)
            names = set() if route is None else {b.broker_name for b in route.broker_datas}
            return names == set(brokers)

        await wait_until(routed, 30, f"the registry routing {topic} to {' and '.join(brokers)}")


async def stored_per_broker(namesrv: str, topic: str) -> Counter[str]:
    """Messages each broker stored for ``topic``, from its consume queues' offsets."""
    async with Admin(namesrv_addr=namesrv) as admin:
        stats = await admin.topic_stats(topic)
    counts: Counter[str] = Counter()
    for queue, offsets in stats.offset_table.items():
        counts[queue.broker_name] += offsets.max_offset - offsets.min_offset
    return counts


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoBrokerGroups]:
    """broker-a and broker-b, both routed for TBW102."""
    groups = TwoBrokerGroups(tmp_path_factory.mktemp("two-groups"))
    try:
        anyio.run(routes_to, groups.namesrv, "TBW102")
        yield groups
    finally:
        groups.stop()
