"""The data source's options: which exist, what they take, and their checked, typed form.

Spark hands a Python data source its options with the names lower-cased, so names are matched
without regard to case and reported in their documented spelling. An unknown name is refused
with the list of known ones (a misspelt ``startingOffset`` silently reading everything would be
worse than an error), and so is an option given where it does not apply: a read option to a
write, a streaming option (``maxOffsetsPerTrigger``, ``groupId``) to a batch read, a batch one
(``endingOffsets``) to a streaming read.
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
DEFAULT_MAX_TRIGGER_DELAY = 15.0
"""Seconds a micro-batch waits for minOffsetsPerTrigger messages at most (Kafka's 15m is
meant for large batches; BoltMQ's default suits topics of modest traffic)."""

READ_OPTIONS = (
    "namesrvAddr", "topic", "topics", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "subExpression", "minPartitions", "pullBatchSize", "failOnDataLoss",
)  # fmt: skip
"""Every option a batch read takes, in the order the docs list them."""
STREAM_OPTIONS = (
    "namesrvAddr", "topic", "topics", "startingOffsets", "startingTimestamp", "subExpression",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupId",
    "minPartitions", "pullBatchSize", "failOnDataLoss",
)  # fmt: skip
"""Every option a streaming read takes, in the order the docs list them."""
WRITE_OPTIONS = ("namesrvAddr", "topic", "exactlyOnce", "writeId")
"""Every option a write (batch or streaming) takes."""

_BATCH_READ = ("batch read", READ_OPTIONS)
_STREAM_READ = ("streaming read", STREAM_OPTIONS)
_WRITE = ("write", WRITE_OPTIONS)

_VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_MAX_LENGTH = 127  # RocketMQ's limit, which brokers enforce on every send
_GROUP_MAX_LENGTH = 255  # RocketMQ's limit on a consumer group's name
_WRITE_ID_MAX_LENGTH = 64  # a dedup key carries it on every message: kept short

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
    #: startingTimestamp / endingTimestamp (ms): they replace ``starting`` / ``ending``.
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    #: The tags a read keeps (subExpression); None keeps every message.
    tags: frozenset[str] | None = None


@attrs.frozen
class StreamOptions:
    """A streaming read's checked options.

    ``starting`` applies only when a query starts without a checkpoint; ``max_offsets_per_trigger``
    None reads everything available in each micro-batch; ``group_id`` None commits nothing.
    """

    namesrv_addr: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    max_offsets_per_trigger: int | None = None
    group_id: str | None = None
    min_partitions: int | None = None
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    fail_on_data_loss: bool = True
    starting_timestamp: int | None = None
    tags: frozenset[str] | None = None
    #: minOffsetsPerTrigger: a micro-batch waits for this many new messages ...
    min_offsets_per_trigger: int | None = None
    #: ... or until this many seconds passed since the last batch (maxTriggerDelay).
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY


@attrs.frozen
class WriteOptions:
    """A write's checked options; ``topic`` None means each row's topic column.

    ``exactly_once`` gives every message a dedup key a BoltMQ broker stores only once;
    ``write_id`` names the write in those keys (required for a batch write with exactlyOnce;
    a streaming write uses the query's id when it is not given).
    """

    namesrv_addr: str
    topic: str | None = None
    exactly_once: bool = False
    write_id: str | None = None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a batch read's options; OptionError names the first one that is wrong."""
    given = _by_name(options, _BATCH_READ)
    topics = _topics(given)
    starting_timestamp = _timestamp(given, "startingOffsets", "startingTimestamp")
    ending_timestamp = _timestamp(given, "endingOffsets", "endingTimestamp")
    if None not in (starting_timestamp, ending_timestamp) and (
        starting_timestamp > ending_timestamp  # type: ignore[operator]
    ):
        raise OptionError(
            f"option startingTimestamp {starting_timestamp} is after endingTimestamp "
            f"{ending_timestamp}"
        )
    return ReadOptions(
        namesrv_addr=_namesrv_addr(given), topics=topics,
        starting=_offsets("startingOffsets", given.get("startingOffsets"), EARLIEST, topics),
        ending=_offsets("endingOffsets", given.get("endingOffsets"), LATEST, topics),
        min_partitions=_optional_positive_int(given, "minPartitions"),
        pull_batch_size=_pull_batch_size(given), fail_on_data_loss=_fail_on_data_loss(given),
        starting_timestamp=starting_timestamp, ending_timestamp=ending_timestamp,
        tags=_sub_expression(given),
    )  # fmt: skip


def stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Check a streaming read's options; OptionError names the first one that is wrong.

    startingOffsets defaults to ``latest`` here, as in Spark's Kafka source: a new query reads
    what is sent from now on.
    """
    given = _by_name(options, _STREAM_READ)
    topics = _topics(given)
    group_id = None
    if "groupId" in given:
        group_id = _name("groupId", given["groupId"], _GROUP_MAX_LENGTH)
    return StreamOptions(
        namesrv_addr=_namesrv_addr(given), topics=topics,
        starting=_offsets("startingOffsets", given.get("startingOffsets"), LATEST, topics),
        max_offsets_per_trigger=_optional_positive_int(given, "maxOffsetsPerTrigger"),
        group_id=group_id, min_partitions=_optional_positive_int(given, "minPartitions"),
        pull_batch_size=_pull_batch_size(given), fail_on_data_loss=_fail_on_data_loss(given),
        starting_timestamp=_timestamp(given, "startingOffsets", "startingTimestamp"),
        tags=_sub_expression(given),
        min_offsets_per_trigger=_optional_positive_int(given, "minOffsetsPerTrigger"),
        max_trigger_delay=_duration(given, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
    )  # fmt: skip


def check_read_options(options: Mapping[str, str]) -> None:
    """Check a read's options before Spark says whether it is a batch or a streaming read.

    Spark asks for the schema at ``load()`` for both; each name must belong to one of the two
    (and the options given must not mix them), and each value must be one it takes.
    """
    _by_name(options, _BATCH_READ, _STREAM_READ)
    names = {name.lower() for name in options}
    batch_only = [n for n in READ_OPTIONS if n not in STREAM_OPTIONS and n.lower() in names]
    stream_only = [n for n in STREAM_OPTIONS if n not in READ_OPTIONS and n.lower() in names]
    if batch_only and stream_only:
        raise OptionError(
            f"option {batch_only[0]} applies to batch reads only and option {stream_only[0]} "
            "to streaming reads only; give one or the other"
        )
    if stream_only:
        stream_options(options)
    else:
        read_options(options)


def write_options(options: Mapping[str, str], streaming: bool = False) -> WriteOptions:
    """Check a write's options; OptionError names the first one that is wrong.

    A batch write with ``exactlyOnce=true`` needs ``writeId``, the same on every run of the
    same job (a streaming write has its query's id); ``writeId`` without exactlyOnce is
    refused, since it would do nothing.
    """
    given = _by_name(options, _WRITE)
    topic = _topic_name("topic", given["topic"]) if "topic" in given else None
    exactly_once = _boolean("exactlyOnce", given.get("exactlyOnce", "false"))
    write_id = None
    if "writeId" in given:
        if not exactly_once:
            raise OptionError("option writeId applies with exactlyOnce=true only; set both")
        write_id = _name("writeId", given["writeId"], _WRITE_ID_MAX_LENGTH, "a write id")
    elif exactly_once and not streaming:
        raise OptionError(
            "option exactlyOnce=true needs option writeId: a name for this write that stays the "
            "same when the job runs again (its messages' dedup keys are made from it)"
        )
    return WriteOptions(namesrv_addr=_namesrv_addr(given), topic=topic,
                        exactly_once=exactly_once, write_id=write_id)  # fmt: skip


# -- single options ------------------------------------------------------------------------------


def _by_name(options: Mapping[str, str], *uses: tuple[str, tuple[str, ...]]) -> dict[str, str]:
    """The options under their documented names; a name none of ``uses`` (action, the options
    it takes) takes is refused, naming where it does apply."""
    everywhere = (_BATCH_READ, _STREAM_READ, _WRITE)
    spelling = {name.lower(): name for _, names in everywhere for name in names}
    allowed = {name for _, names in uses for name in names}
    takes = "; ".join(f"a {action} takes: {', '.join(names)}" for action, names in uses)
    given: dict[str, str] = {}
    for key, value in options.items():
        name = spelling.get(key.lower())
        if name is None:
            hint = " (boltmq takes no path: name the topic with option topic)" if (
                key.lower() == "path") else ""  # fmt: skip
            raise OptionError(
                f"unknown boltmq option {key!r}{hint}; {takes} (names are not case-sensitive)"
            )
        if name not in allowed:
            raise OptionError(f"option {name} applies to {_applies_to(name)} only; {takes}")
        given[name] = value
    return given


def _applies_to(name: str) -> str:
    if name in READ_OPTIONS and name in STREAM_OPTIONS:
        return "reads"
    if name in READ_OPTIONS:
        return "batch reads"
    if name in STREAM_OPTIONS:
        return "streaming reads"
    return "writes"


def _topics(given: Mapping[str, str]) -> tuple[str, ...]:
    if "topic" in given and "topics" in given:
        raise OptionError("give either topic or topics, not both")
    if "topic" in given:
        return (_topic_name("topic", given["topic"]),)
    if "topics" in given:
        names = [part.strip() for part in given["topics"].split(",")]
        if not any(names):
            raise OptionError("option topics is empty: give topic names separated by commas")
        topics = tuple(_topic_name("topics", name) for name in names if name)
        if len(set(topics)) != len(topics):
            raise OptionError(f"option topics names a topic twice: {given['topics']!r}")
        return topics
    raise OptionError("a read needs option topic (one topic) or topics (comma-separated)")


def _timestamp(given: Mapping[str, str], offsets_option: str, option: str) -> int | None:
    """A timestamp option in ms since the epoch; it and the offsets option for the same end
    cannot both be given."""
    if option not in given:
        return None
    if offsets_option in given:
        raise OptionError(
            f"options {offsets_option} and {option} both set where the read starts or ends; "
            "give one of them"
        )
    value = given[option]
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if number < 0:
        raise OptionError(
            f"option {option} must be milliseconds since the epoch (a whole number >= 0, such "
            f"as 1767225600000), not {value!r}"
        )
    return number


def _sub_expression(given: Mapping[str, str]) -> frozenset[str] | None:
    """subExpression ``TagA || TagB`` as its tags; ``*`` (or no option) as None: every message."""
    if "subExpression" not in given:
        return None
    text = given["subExpression"].strip()
    if text == "*":
        return None
    tags = [tag.strip() for tag in text.split("||")]
    if not text or not all(tags) or any(c in tag for tag in tags for c in "*|"):
        raise OptionError(
            f"option subExpression must be * or tags separated by ||, such as 'TagA || TagB', "
            f"not {given['subExpression']!r}"
        )
    return frozenset(tags)


def _duration(given: Mapping[str, str], option: str, default: float) -> float:
    """A duration such as ``30s``, ``5m``, ``500ms`` or plain seconds, in seconds."""
    if option not in given:
        return default
    value = given[option]
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value.lower())
    if match is None:
        raise OptionError(
            f"option {option} must be a duration such as 500ms, 30s, 5m or 1h, not {value!r}"
        )
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]
    return float(match.group(1)) * scale


def _optional_positive_int(given: Mapping[str, str], option: str) -> int | None:
    return _positive_int(option, given[option]) if option in given else None


def _pull_batch_size(given: Mapping[str, str]) -> int:
    return _optional_positive_int(given, "pullBatchSize") or DEFAULT_PULL_BATCH_SIZE


def _fail_on_data_loss(given: Mapping[str, str]) -> bool:
    return _boolean("failOnDataLoss", given.get("failOnDataLoss", "true"))


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
    return _name(option, name, _TOPIC_MAX_LENGTH, "a topic name")


def _name(option: str, name: str, max_length: int, what: str = "a group name") -> str:
    name = name.strip()
    if not name:
        raise OptionError(f"option {option} is empty")
    if len(name) > max_length or not _VALID_TOPIC.match(name):
        raise OptionError(
            f"option {option}: {name!r} is not {what} (1..{max_length} characters "
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
