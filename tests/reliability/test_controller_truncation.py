"""An old master with a divergent tail rejoins its group as a slave and truncates it.

Two controller-mode brokers of the ASYNC_MASTER flavour (a put is acknowledged before the
slave has it) and a controller that may elect a broker outside the SyncStateSet
(enableElectUncleanMaster). The slave is killed, the master acknowledges a tail the slave never
gets, then the master is killed too. The slave returns alone and is elected; it takes other
messages at the same offsets. When the old master returns it becomes a slave: it asks the new
master's epoch cache, truncates its commit log to the last offset both agree on (logged with
both offsets), and follows; afterwards the two commit logs are identical byte for byte.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protocol import RemotingClient, ResponseCode
from tests.reliability.failover import SendLog, send_to, start_group
from tests.reliability.nodes import (
    commit_log_bytes,
    epoch_cache,
    max_offset,
    read_queue,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "DivergentTailTopic"
TRUNCATED = re.compile(r"truncated commit log from (\d+) to (\d+) \(epoch (\d+)\)")


async def test_a_returning_master_truncates_its_divergent_tail(tmp_path: Path) -> None:
    group = await start_group(
        tmp_path, brokers=2, broker_settings={"brokerRole": "ASYNC_MASTER"},
        controller_settings={"enableElectUncleanMaster": "true"},
    )  # fmt: skip
    log = SendLog()
    try:
        async with RemotingClient() as client:
            old, before = await group.wait_master(client)
            slave = next(b for b in group.brokers if b is not old)
            await group.wait_in_sync(client, 2)
            await group.create_topic(client, TOPIC, old, 1)
            for n in range(40):
                code = await send_to(client, old.address, TOPIC, f"shared-{n}".encode(), 0, log)
                assert code == ResponseCode.SUCCESS, log.failures[-1:]
            shared = await max_offset(client, old.address, TOPIC, 0)

            async def slave_has_all() -> bool:
                try:
                    return await max_offset(client, slave.address, TOPIC, 0) == shared
                except Exception:
                    return False

            await wait_until(slave_has_all, 60, "the slave holding the shared messages")
            shared_end = (await epoch_cache(client, old.address)).max_offset

            # The tail only the old master will ever have.
            await slave.kill()
            for n in range(25):
                code = await send_to(client, old.address, TOPIC, f"tail-{n}".encode(), 0, log)
                assert code == ResponseCode.SUCCESS, log.failures[-1:]
            old_end = (await epoch_cache(client, old.address)).max_offset
            assert old_end > shared_end
            await old.kill()

            # The slave returns alone and is elected; it writes other messages.
            await slave.start()
            new, after = await group.wait_master(client, above_epoch=before.master_epoch)
            assert new is slave

            async def accepted(n: int) -> bool:
                body = f"new-{n}".encode()
                return (
                    await send_to(client, new.address, TOPIC, body, 0, log) == ResponseCode.SUCCESS
                )

            for n in range(30):
                await wait_until(lambda n=n: accepted(n), 30, "a send to the new master")
            new_cache = await epoch_cache(client, new.address)
            assert new_cache.max_offset > old_end, "the new master's log should pass the tail"

            # The old master returns as a slave and truncates to the new epoch's start.
            seen = len(old.log_text())
            await old.start()
            await wait_until(
                lambda: TRUNCATED.search(old.log_text()[seen:]), 60, "the truncation logged"
            )
            match = TRUNCATED.search(old.log_text()[seen:])
            assert match is not None
            assert (int(match[1]), int(match[2])) == (old_end, shared_end), match[0]
            assert int(match[3]) == before.master_epoch, match[0]

            async def same_end() -> bool:
                try:
                    ends = [(await epoch_cache(client, b.address)).max_offset for b in (old, new)]
                except Exception:
                    return False
                return ends[0] == ends[1]

            await wait_until(same_end, 60, "the old master caught up with the new one")
            end = (await epoch_cache(client, new.address)).max_offset
            assert commit_log_bytes(old.store, end) == commit_log_bytes(new.store, end)
            assert (await epoch_cache(client, old.address)).epoch_list == (
                await epoch_cache(client, new.address)
            ).epoch_list
            bodies = [m.body for m in await read_queue(client, new.address, TOPIC, 0)]
            assert not [b for b in bodies if b.startswith(b"tail-")]
            assert len(bodies) == 40 + 30
            assert after.master_epoch > before.master_epoch
    finally:
        await group.stop()
