"""Message statistics (RocketMQ's BrokerStatsManager, StatsItem and BrokerStats) and the admin
requests that read them: GET_BROKER_RUNTIME_INFO, VIEW_BROKER_STATS_DATA, GET_TOPIC_STATS_INFO
and GET_CONSUME_STATS (QUERY_TOPIC_CONSUME_BY_WHO and QUERY_CONSUME_TIME_SPAN are operator
requests, in consumer_admin.py).

Counting sits on the send and pull paths, so it is a few integer adds into lists kept in
dicts: `BrokerStatsManager.on_put` after a stored send (per topic: messages, bytes, requests),
`on_get` after a FOUND pull (per topic and group), plus broker-wide totals. No lock (one trio
thread), no object per message. The collector's `run` task samples every counter every 10 s
into ring buffers as RocketMQ's StatsItem does: the last 7 samples 10 s apart (one minute),
the last 7 taken every 10 minutes (one hour), the last 25 taken every hour (one day). A
window's sum is the difference of its first and last sample, its tps that sum per second, and
its avgpt that sum per request. At local midnight the totals become "today morning" (and the
previous ones "yesterday morning"), as RocketMQ's BrokerStats does.

For the Prometheus metrics (`actors.broker.services.metrics`) `on_put` also counts by message type
(RocketMQ 5's normal, fifo, delay, transaction) with a message-size histogram: a bisect and
two more integer adds (request latencies and dead letters are in request_stats.py).

Stats names and keys (VIEW_BROKER_STATS_DATA): TOPIC_PUT_NUMS / TOPIC_PUT_SIZE by topic,
GROUP_GET_NUMS / GROUP_GET_SIZE by ``topic@group``, BROKER_PUT_NUMS / BROKER_GET_NUMS by the
cluster name. A delayed or transactional send counts under the topic the producer named.
"""

from __future__ import annotations

import bisect
import datetime
import math
import time
from collections import deque
from collections.abc import Callable

import attrs
import trio

from actors.broker.services.request_stats import (
    MESSAGE_SIZE_BUCKETS,
    MESSAGE_TYPES,
    NORMAL,
    TYPED_BUCKETS,
)

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"

#: Seconds between samples of the minute window.
SAMPLE_INTERVAL = 10.0
#: Ticks between samples of the hour window (10 minutes) and of the day window (1 hour).
HOUR_SAMPLE_TICKS = 60
DAY_SAMPLE_TICKS = 360
MINUTE_SLOTS, HOUR_SLOTS, DAY_SLOTS = 7, 7, 25
#: CURRENT_VERSION (409) is MQVersion.Version.V4_9_8's ordinal.
BROKER_VERSION_DESC = "V4_9_8"

# Positions in a counter list: messages, bytes, requests.
NUMS, SIZE, TIMES = 0, 1, 2
#: VIEW_BROKER_STATS_DATA's stats names and the counter field each reads.
STATS_FIELDS = {
    TOPIC_PUT_NUMS: NUMS,
    TOPIC_PUT_SIZE: SIZE,
    GROUP_GET_NUMS: NUMS,
    GROUP_GET_SIZE: SIZE,
    BROKER_PUT_NUMS: NUMS,
    BROKER_GET_NUMS: NUMS,
}

Sample = tuple[float, int, int, int]  # (trio time, messages, bytes, requests)


@attrs.frozen
class StatsSnapshot:
    """One window of one statistic: its sum, per second, and per request."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class StatsSeries:
    """The three sample rings of one counter list."""

    __slots__ = ("counter", "day", "hour", "minute")

    def __init__(self, counter: list[int]) -> None:
        self.counter = counter
        self.minute: deque[Sample] = deque(maxlen=MINUTE_SLOTS)
        self.hour: deque[Sample] = deque(maxlen=HOUR_SLOTS)
        self.day: deque[Sample] = deque(maxlen=DAY_SLOTS)

    def sample(self, now: float, interval: float, hour: bool, day: bool) -> None:
        """Append the counter's values to the minute ring (and the hour / day rings)."""
        c = self.counter
        sample = (now, c[NUMS], c[SIZE], c[TIMES])
        for ring, due, spacing in (
            (self.minute, True, interval),
            (self.hour, hour, interval * HOUR_SAMPLE_TICKS),
            (self.day, day, interval * DAY_SAMPLE_TICKS),
        ):
            if due:
                if not ring:
                    # The counter did not exist at the previous sample, so it was zero then.
                    ring.append((now - spacing, 0, 0, 0))
                ring.append(sample)

    def windows(self, field: int) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot]:
        """Minute, hour and day windows of one field (NUMS or SIZE)."""
        return (_window(self.minute, field), _window(self.hour, field), _window(self.day, field))


def _window(ring: deque[Sample], field: int) -> StatsSnapshot:
    if len(ring) < 2:
        return StatsSnapshot()
    first = ring[0]
    last = ring[-1]
    total = int(last[1 + field] - first[1 + field])
    seconds = last[0] - first[0]
    requests = last[3] - first[3]
    return StatsSnapshot(
        total, total / seconds if seconds > 0 else 0.0, total / requests if requests > 0 else 0.0
    )


@attrs.frozen
class BrokerStatsStatistics:
    """Totals of the collector."""

    put_messages: int
    put_bytes: int
    get_messages: int
    get_bytes: int
    topics: int
    groups: int
    samples: int


class BrokerStatsManager:
    """The statistics collector; see the module docstring."""

    def __init__(
        self,
        cluster_name: str,
        *,
        interval: float = SAMPLE_INTERVAL,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster_name = cluster_name
        self.interval = interval
        self.wall_clock = wall_clock
        #: topic -> [messages, bytes, requests] of stored sends.
        self.topic_put: dict[str, list[int]] = {}
        #: topic -> group -> [messages, bytes, requests] of FOUND pulls.
        self.group_get: dict[str, dict[str, list[int]]] = {}
        self.broker_put = [0, 0, 0]
        self.broker_get = [0, 0, 0]
        #: topic -> one counter per message type: [messages, bytes, *size buckets, overflow].
        self.topic_put_typed: dict[str, list[list[int]]] = {}
        self.msg_put_total_yesterday_morning = 0
        self.msg_put_total_today_morning = 0
        self.msg_get_total_yesterday_morning = 0
        self.msg_get_total_today_morning = 0
        self.boot_timestamp = int(wall_clock() * 1000)
        self.ticks = 0
        self._topic_series: dict[str, StatsSeries] = {}
        self._group_series: dict[str, StatsSeries] = {}  # "topic@group"
        self._broker_put_series = StatsSeries(self.broker_put)
        self._broker_get_series = StatsSeries(self.broker_get)
        self._next_morning = next_morning(wall_clock())

    # -- counting (hot path) -----------------------------------------------------------------

    def on_put(self, topic: str, nums: int, size: int, message_type: int = NORMAL) -> None:
        """A send of ``nums`` messages and ``size`` bytes to ``topic`` was stored."""
        counter = self.topic_put.get(topic)
        if counter is None:
            counter = self.topic_put[topic] = [0, 0, 0]
            width = TYPED_BUCKETS + len(MESSAGE_SIZE_BUCKETS) + 1
            self.topic_put_typed[topic] = [[0] * width for _ in MESSAGE_TYPES]
        counter[0] += nums
        counter[1] += size
        counter[2] += 1
        typed = self.topic_put_typed[topic][message_type]
        typed[0] += nums
        typed[1] += size
        # A batch counts its messages in the bucket of their average size.
        typed[TYPED_BUCKETS + bisect.bisect_left(MESSAGE_SIZE_BUCKETS, size // max(nums, 1))] += (
            nums
        )
        broker = self.broker_put
        broker[0] += nums
        broker[1] += size
        broker[2] += 1

    def on_get(self, group: str, topic: str, nums: int, size: int) -> None:
        """A pull of ``group`` found ``nums`` messages (``size`` bytes) of ``topic``."""
        groups = self.group_get.get(topic)
        if groups is None:
            groups = self.group_get[topic] = {}
        counter = groups.get(group)
        if counter is None:
            counter = groups[group] = [0, 0, 0]
        counter[0] += nums
        counter[1] += size
        counter[2] += 1
        broker = self.broker_get
        broker[0] += nums
        broker[1] += size
        broker[2] += 1

    # -- sampling ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample every ``interval`` seconds (fixed rate); roll the daily totals at midnight."""
        task_status.started()
        next_tick = trio.current_time() + self.interval
        while True:
            await trio.sleep_until(next_tick)
            next_tick += self.interval
            self.sample()
            if self.wall_clock() >= self._next_morning:
                self.record_day()

    def sample(self, now: float | None = None) -> None:
        """Take one sample of every counter (``now`` defaults to trio's clock)."""
        now = trio.current_time() if now is None else now
        self.ticks += 1
        hour = self.ticks % HOUR_SAMPLE_TICKS == 0
        day = self.ticks % DAY_SAMPLE_TICKS == 0
        interval = self.interval
        for topic, counter in self.topic_put.items():
            series = self._topic_series.get(topic)
            if series is None:
                series = self._topic_series[topic] = StatsSeries(counter)
            series.sample(now, interval, hour, day)
        for topic, groups in self.group_get.items():
            for group, counter in groups.items():
                key = f"{topic}@{group}"
                series = self._group_series.get(key)
                if series is None:
                    series = self._group_series[key] = StatsSeries(counter)
                series.sample(now, interval, hour, day)
        self._broker_put_series.sample(now, interval, hour, day)
        self._broker_get_series.sample(now, interval, hour, day)

    def record_day(self) -> None:
        """Midnight: today's morning totals become yesterday's, the current ones today's."""
        self.msg_put_total_yesterday_morning = self.msg_put_total_today_morning
        self.msg_put_total_today_morning = self.broker_put[NUMS]
        self.msg_get_total_yesterday_morning = self.msg_get_total_today_morning
        self.msg_get_total_today_morning = self.broker_get[NUMS]
        self._next_morning = next_morning(self.wall_clock())

    # -- reading -------------------------------------------------------------------------------

    def stats_item(
        self, stats_name: str, stats_key: str
    ) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot] | None:
        """Minute, hour and day windows of one statistic; None when it is unknown."""
        field = STATS_FIELDS.get(stats_name)
        if field is None:
            return None
        if stats_name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            series = self._topic_series.get(stats_key)
        elif stats_name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            series = self._group_series.get(stats_key)
        elif stats_key != self.cluster_name:
            series = None
        elif stats_name == BROKER_PUT_NUMS:
            series = self._broker_put_series
        else:
            series = self._broker_get_series
        return None if series is None else series.windows(field)

    def topic_put_tps(self, topic: str, field: int = NUMS) -> float:
        """Messages (or bytes) per second stored to ``topic`` over the last minute."""
        series = self._topic_series.get(topic)
        return 0.0 if series is None else _window(series.minute, field).tps

    def group_get_tps(self, group: str, topic: str, field: int = NUMS) -> float:
        """Messages (or bytes) per second ``group`` pulled from ``topic`` over the last minute."""
        series = self._group_series.get(f"{topic}@{group}")
        return 0.0 if series is None else _window(series.minute, field).tps

    def broker_tps(self) -> tuple[float, float]:
        """Messages stored and pulled per second over the last minute."""
        return (
            _window(self._broker_put_series.minute, NUMS).tps,
            _window(self._broker_get_series.minute, NUMS).tps,
        )

    def tps_group_get_nums(self, group: str, topic: str) -> float:
        """Messages per second ``group`` pulled from ``topic`` over the last minute."""
        series = self._group_series.get(f"{topic}@{group}")
        return 0.0 if series is None else _window(series.minute, NUMS).tps

    def put_tps(self) -> str:
        """Messages stored per second over 10 s, 60 s and 600 s (runtime info ``putTps``)."""
        return _tps_text(self._broker_put_series, NUMS)

    def get_transfered_tps(self) -> str:
        """Messages pulled per second over 10 s, 60 s and 600 s (``getTransferedTps``)."""
        return _tps_text(self._broker_get_series, NUMS)

    def get_found_tps(self) -> str:
        """FOUND pulls per second over 10 s, 60 s and 600 s (``getFoundTps``)."""
        return _tps_text(self._broker_get_series, TIMES)

    def statistics(self) -> BrokerStatsStatistics:
        """The collector's totals."""
        return BrokerStatsStatistics(
            put_messages=self.broker_put[NUMS],
            put_bytes=self.broker_put[SIZE],
            get_messages=self.broker_get[NUMS],
            get_bytes=self.broker_get[SIZE],
            topics=len(self.topic_put),
            groups=sum(len(groups) for groups in self.group_get.values()),
            samples=self.ticks,
        )


def _tps_text(series: StatsSeries, field: int) -> str:
    # RocketMQ writes "<10 s> <60 s> <600 s>", an empty part when there are too few samples.
    index = 1 + field

    def tps(ring: deque[Sample], span: int) -> str:
        if len(ring) <= span:
            return ""
        first, last = ring[-1 - span], ring[-1]
        seconds = last[0] - first[0]
        return repr((last[index] - first[index]) / seconds) if seconds > 0 else "0.0"

    return " ".join((tps(series.minute, 1), tps(series.minute, 6), tps(series.hour, 1)))


def next_morning(now: float) -> float:
    """The wall-clock time of the next local midnight after ``now``."""
    today = datetime.datetime.fromtimestamp(now).date()
    midnight = datetime.datetime.combine(today + datetime.timedelta(days=1), datetime.time())
    return midnight.timestamp()


def human_readable_bytes(size: int) -> str:
    """``1.5 GiB`` style, as RocketMQ's MixAll.humanReadableByteCount(bytes, false)."""
    if size < 1024:
        return f"{size} B"
    exp = min(int(math.log(size) / math.log(1024)), 6)
    return f"{size / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "BrokerStatsManager",
    "BrokerStatsStatistics",
    "StatsSnapshot",
]
