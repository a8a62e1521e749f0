"""Put latency from a broker's ``putMessageDistributeTime`` (GET_BROKER_RUNTIME_INFO).

RocketMQ writes the histogram as ``[<=0ms]:12 [0~10ms]:3 [10~50ms]:0 ... [10s~]:0``: puts
counted per latency bucket since the broker started. Between two refreshes the difference of
two histograms gives the recent puts; the monitor shows the bucket holding the 99th
percentile and the share of puts that took 10 ms or more.
"""

from __future__ import annotations

import re

import attrs

_BUCKET = re.compile(r"(\[[^\]]+\]):(\d+)")
#: Buckets of 10 ms and more start at this index ([<=0ms], [0~10ms] come first).
_SLOW_FROM = 2


@attrs.frozen
class PutLatency:
    """A put-latency summary: the p99 bucket, the share at 10 ms or more, and over how many."""

    p99: str
    over_10ms: float
    puts: int

    def text(self) -> str:
        """The cell: ``p99 [0~10ms], 0.3% ≥10ms``."""
        return f"p99 {self.p99}, {self.over_10ms:.1%} ≥10ms"


def parse(text: str | None) -> list[tuple[str, int]] | None:
    """The buckets of a histogram text in order; None when absent or not one."""
    if not text:
        return None
    buckets = [(name, int(n)) for name, n in _BUCKET.findall(text)]
    return buckets if len(buckets) > _SLOW_FROM else None


def summarize(text: str | None, previous: str | None = None) -> PutLatency | None:
    """The summary of the puts since ``previous`` (the same broker's earlier histogram), or
    since the broker started when there is none or it restarted; None without puts."""
    now = parse(text)
    if now is None:
        return None
    before = parse(previous)
    counts = [n for _, n in now]
    if before is not None and [b for b, _ in before] == [b for b, _ in now]:
        delta = [n - p for n, (_, p) in zip(counts, before, strict=True)]
        if min(delta) >= 0 and sum(delta) > 0:  # else it restarted, or no put since
            counts = delta
    total = sum(counts)
    if total == 0:
        return None
    running = 0
    p99 = now[-1][0]
    for (name, _), n in zip(now, counts, strict=True):
        running += n
        if running * 100 >= total * 99:
            p99 = name
            break
    return PutLatency(p99, sum(counts[_SLOW_FROM:]) / total, total)
