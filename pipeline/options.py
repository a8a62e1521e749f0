"""The data source's options: which exist, what they take, and their checked, typed form.

Spark hands a Python data source its options with the names lower-cased, so names are matched
without regard to case and reported in their documented spelling. An unknown name is refused
with the list of known ones (a misspelt ``startingOffset`` silently reading everything would be
worse than an error), and so is a read option given to a write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import attrs

from pipeline.errors import OptionError

EARLIEST = -2
"""An offset in startingOffsets / endingOffsets JSON meaning the queue's min offset."""
LATEST = -1
"""An offset in startingOffsets / endingOffsets JSON meaning the queue's max offset."""

DEFAULT_PULL_BATCH_SIZE = 32

READ_OPTIONS = (
    "namesrvAddr", "topic", "topics", "startingOffsets", "endingOffsets", "minPartitions",
    "pullBatchSize", "failOnDataLoss",
)  # fmt: skip
"""Every option a read takes, in the order the docs list them."""
WRITE_OPTIONS = ("namesrvAddr", "topic")
"""Every option a write takes."""

_VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_MAX_LENGTH = 127  # RocketMQ's limit, which brokers enforce on every send

QueueKey = tuple[str, str, int]
"""(topic, broker name, queue id): one queue of a topic."""


@attrs.frozen
class OffsetSpec:
    """startingOffsets or endingOffsets: the offset of each named queue, a default for the rest.

    Offsets are queue offsets; `EARLIEST` (-2) and `LATEST` (-1) stand for the queue's min and
    max offset, resolved on the driver when the read is planned.
    """

    option: str
    default: int
    queues: Mapping[QueueKey, int] = attrs.field(factory=dict)

    def requested(self, topic: str, broker_name: str, queue_id: int) -> int:
        """The offset asked for one queue: explicit, `EARLIEST` or `LATEST`."""
        return self.queues.get((topic, broker_name, queue_id), self.default)

    def describe(self, offset: int) -> str:
        """How an asked offset reads in a message: ``earliest``, ``latest`` or the number."""
        return {EARLIEST: "earliest", LATEST: "latest"}.get(offset, str(offset))


@attrs.frozen
class ReadOptions:
    """A batch read's checked options."""

    namesrv_addr: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None = None
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    fail_on_data_loss: bool = True


@attrs.frozen
class WriteOptions:
    """A batch write's checked options; ``topic`` None means each row's topic column."""

    namesrv_addr: str
    topic: str | None = None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a read's options; OptionError names the first one that is wrong."""
    given = _by_name(options, READ_OPTIONS, "read")
    namesrv_addr = _namesrv_addr(given)
    if "topic" in given and "topics" in given:
        raise OptionError("give either topic or topics, not both")
    if "topic" in given:
        topics: tuple[str, ...] = (_topic_name("topic", given["topic"]),)
    elif "topics" in given:
        names = [part.strip() for part in given["topics"].split(",")]
        if not any(names):
            raise OptionError("option topics is empty: give topic names separated by commas")
        topics = tuple(_topic_name("topics", name) for name in names if name)
        if len(set(topics)) != len(topics):
            raise OptionError(f"option topics names a topic twice: {given['topics']!r}")
    else:
        raise OptionError("a read needs option topic (one topic) or topics (comma-separated)")
    starting = _offsets("startingOffsets", given.get("startingOffsets"), EARLIEST, topics)
    ending = _offsets("endingOffsets", given.get("endingOffsets"), LATEST, topics)
    min_partitions = None
    if "minPartitions" in given:
        min_partitions = _positive_int("minPartitions", given["minPartitions"])
    pull_batch_size = DEFAULT_PULL_BATCH_SIZE
    if "pullBatchSize" in given:
        pull_batch_size = _positive_int("pullBatchSize", given["pullBatchSize"])
    fail_on_data_loss = _boolean("failOnDataLoss", given.get("failOnDataLoss", "true"))
    return ReadOptions(
        namesrv_addr=namesrv_addr, topics=topics, starting=starting, ending=ending,
        min_partitions=min_partitions, pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss,
    )  # fmt: skip


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options; OptionError names the first one that is wrong."""
    given = _by_name(options, WRITE_OPTIONS, "write")
    topic = _topic_name("topic", given["topic"]) if "topic" in given else None
    return WriteOptions(namesrv_addr=_namesrv_addr(given), topic=topic)


# -- single options ------------------------------------------------------------------------------


def _by_name(options: Mapping[str, str], allowed: tuple[str, ...], action: str) -> dict[str, str]:
    """The options under their documented names; unknown or misplaced names refused."""
    spelling = {name.lower(): name for name in READ_OPTIONS + WRITE_OPTIONS}
    given: dict[str, str] = {}
    for key, value in options.items():
        name = spelling.get(key.lower())
        if name is None:
            hint = " (boltmq takes no path: name the topic with option topic)" if (
                key.lower() == "path") else ""  # fmt: skip
            raise OptionError(
                f"unknown boltmq option {key!r}{hint}; a {action} takes: {', '.join(allowed)} "
                "(names are not case-sensitive)"
            )
        if name not in allowed:
            raise OptionError(
                f"option {name} applies to reads only; a write takes: {', '.join(allowed)}"
            )
        given[name] = value
    return given


def _namesrv_addr(given: Mapping[str, str]) -> str:
    value = given.get("namesrvAddr")
    if value is None or not value.strip():
        raise OptionError(
            "option namesrvAddr is required: the registry address(es), 'host:port[;host:port]'"
        )
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(
                f"option namesrvAddr: {part!r} is not host:port (in {value!r}; separate "
                "several registries with ';')"
            )
    return value.strip()


def _topic_name(option: str, name: str) -> str:
    name = name.strip()
    if not name:
        raise OptionError(f"option {option} is empty")
    if len(name) > _TOPIC_MAX_LENGTH or not _VALID_TOPIC.match(name):
        raise OptionError(
            f"option {option}: {name!r} is not a topic name (1..{_TOPIC_MAX_LENGTH} characters "
            "of a-z A-Z 0-9 _ - % |)"
        )
    return name


def _positive_int(option: str, value: str) -> int:
    problem = f"option {option} must be a positive whole number, not {value!r}"
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(problem) from None
    if number < 1:
        raise OptionError(problem)
    return number


def _boolean(option: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {option} must be true or false, not {value!r}")
    return text == "true"


def _offsets(option: str, value: str | None, default: int, topics: tuple[str, ...]) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"brokerName": {"queueId": offset}}}``."""
    if value is None:
        return OffsetSpec(option, default)
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(option, EARLIEST if text.lower() == "earliest" else LATEST)
    form = (
        f'option {option} must be earliest, latest or JSON such as '
        f'{{"{topics[0]}": {{"broker-a": {{"0": 42, "1": -2}}}}}} (-2 = earliest, -1 = latest)'
    )
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{form}; {value!r} is neither ({exc})") from None
    if not isinstance(document, dict):
        raise OptionError(f"{form}, not {value!r}")
    queues: dict[QueueKey, int] = {}
    for topic, brokers in document.items():
        if topic not in topics:
            raise OptionError(
                f"option {option} names topic {topic!r}, which this read does not read "
                f"(topics: {', '.join(topics)})"
            )
        if not isinstance(brokers, dict):
            raise OptionError(f"{form}; under {topic!r} comes an object of broker names")
        for broker, ids in brokers.items():
            if not isinstance(ids, dict):
                raise OptionError(
                    f"{form}; under {topic!r}/{broker!r} comes an object of queue ids"
                )
            for queue_id, offset in ids.items():
                if not (isinstance(queue_id, str) and queue_id.isdigit()):
                    raise OptionError(f"option {option}: queue id {queue_id!r} is not a number")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise OptionError(
                        f"option {option}: offset {offset!r} of {topic}/{broker}/{queue_id} "
                        "must be a whole number >= 0, or -2 (earliest) or -1 (latest)"
                    )
                queues[(topic, broker, int(queue_id))] = offset
    return OffsetSpec(option, default, queues)
