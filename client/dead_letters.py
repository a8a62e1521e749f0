"""Dead letters of a consumer group (``%DLQ%<group>``): list, find, and resend them once.

    async with Admin(namesrv_addr="127.0.0.1:9876") as admin:
        letters = DeadLetters(admin)
        dead = await letters.messages("OrderConsumers")
        for outcome in await letters.resend("OrderConsumers", dead):
            print(outcome.status, outcome.topic, outcome.msg_id)

A message lands in the DLQ after its group's retries ran out; the broker stores it there with
``RETRY_TOPIC`` (the topic it was first sent to) and ``ORIGIN_MESSAGE_ID`` (the offset msg id
of the first copy). Resending sends a copy back to ``RETRY_TOPIC``:

- the copy keeps the message's client id (UNIQ_KEY), so consumers see the msgId they saw
  before, its body, flag, tags, keys, user properties and ``ORIGIN_MESSAGE_ID``; the broker's
  retry bookkeeping (RETRY_TOPIC, DELAY, REAL_TOPIC, reconsume counts, ...) is dropped, so the
  group gets its full retries again;
- the copy carries ``DLQ_RESENT_FROM`` = the dead letter's offset msg id. Before sending, the
  original topic's index is asked for the UNIQ_KEY; a copy already marked with this dead
  letter's id means it was resent before, and it is not sent again. So running a resend twice
  sends each dead letter once, and the record lives on the brokers, not on the operator's disk;
- the dead letter itself stays in the DLQ, as RocketMQ operators expect (the DLQ is an
  archive; nothing is deleted or moved).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Sequence

import anyio
import attrs

from client.admin import Admin
from client.browse import QueueBrowser
from client.message import Message, MQClientError
from client.producer import Producer
from protocol import names
from protocol.bodies import PERM_READ
from protocol.codes import ResponseCode
from protocol.message import MessageConst, MessageExt

log = logging.getLogger("boltmq.client")

#: The property a resent copy carries: the offset msg id of the dead letter it copies.
DLQ_RESENT_FROM = "DLQ_RESENT_FROM"
#: The producer group resends are sent with (RocketMQ's tools use TOOLS_* groups).
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"

#: The broker's bookkeeping of a delivery attempt: a resent copy starts afresh without it.
_DROPPED_PROPERTIES = frozenset({
    MessageConst.RETRY_TOPIC, MessageConst.DELAY, MessageConst.REAL_TOPIC, MessageConst.REAL_QID,
    MessageConst.WAIT, MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET,
    MessageConst.RECONSUME_TIME, MessageConst.MAX_RECONSUME_TIMES,
    MessageConst.CONSUME_START_TIMESTAMP, MessageConst.TRAN_MSG, MessageConst.PGROUP,
    MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET, MessageConst.TRANSACTION_CHECK_TIMES,
    MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS, MessageConst.START_DELIVER_TIME,
    MessageConst.UNIQ_KEY, MessageConst.INNER_MULTI_DISPATCH,
    MessageConst.INNER_MULTI_QUEUE_OFFSET, DLQ_RESENT_FROM,
})  # fmt: skip
#: How many copies with one UNIQ_KEY the already-resent check looks at per broker.
_COPIES_CHECKED = 64
#: The dead-letter topic of a group: ``%DLQ%<group>``.
dlq_topic = names.dlq_topic


def origin_topic(letter: MessageExt) -> str | None:
    """The topic a dead letter was first sent to (its RETRY_TOPIC), None when it has none."""
    return letter.properties.get(MessageConst.RETRY_TOPIC) or None


class ResendStatus(enum.Enum):
    """What a resend did with one dead letter."""

    RESENT = "RESENT"
    ALREADY_RESENT = "ALREADY_RESENT"
    NO_ORIGIN_TOPIC = "NO_ORIGIN_TOPIC"


@attrs.frozen
class ResendOutcome:
    """One dead letter's resend: its status and the copy in the original topic, if any."""

    dead_letter: MessageExt
    status: ResendStatus
    topic: str | None
    #: The copy's offset msg id and place (the earlier copy's when already resent).
    offset_msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None

    @property
    def msg_id(self) -> str:
        """The client msg id the copy carries (the dead letter's)."""
        return self.dead_letter.msg_id


class DeadLetters:
    """Dead-letter operations on one cluster, built on an open `Admin`."""

    def __init__(self, admin: Admin, *, producer_group: str = TOOLS_PRODUCER_GROUP) -> None:
        self.admin = admin
        self.producer_group = producer_group

    async def messages(self, group: str) -> list[MessageExt]:
        """Every dead letter of ``group`` still stored, queue by queue, oldest first.

        Empty when the group never had one (no ``%DLQ%<group>`` topic).
        """
        topic = dlq_topic(group)
        route = await self.admin.instance.update_route(topic)
        if route is None:
            return []
        unreadable = sorted(q.broker_name for q in route.queue_datas if not q.perm & PERM_READ)
        if unreadable:
            # Listing the readable brokers alone would hide dead letters: refuse instead.
            raise MQClientError(
                ResponseCode.NO_PERMISSION,
                f"{topic} may not be read on broker {', '.join(unreadable)} (a write-only "
                f"DLQ); give it read permission with updateTopicPerm -t {topic} -p 6",
            )
        async with QueueBrowser(self.admin.instance, timeout=self.admin.timeout) as browser:
            letters: list[MessageExt] = []
            for queue in await browser.queues(topic):
                begin = await browser.min_offset(queue)
                end = await browser.max_offset(queue)
                letters.extend(await browser.read(queue, begin, end))
        return letters

    async def find(self, group: str, ids: Iterable[str]) -> list[MessageExt]:
        """The dead letters of ``group`` whose msgId or offsetMsgId is one of ``ids``.

        MQClientError(QUERY_NOT_FOUND) names the ids that are not in the DLQ.
        """
        wanted = list(dict.fromkeys(ids))
        letters = await self.messages(group)
        found = [m for m in letters if m.msg_id in wanted or m.offset_msg_id in wanted]
        seen = {m.msg_id for m in found} | {m.offset_msg_id for m in found}
        missing = [i for i in wanted if i not in seen]
        if missing:
            raise MQClientError(
                ResponseCode.QUERY_NOT_FOUND,
                f"no dead letter {', '.join(missing)} in {dlq_topic(group)}",
            )
        return found

    async def resend(self, group: str, letters: Sequence[MessageExt]) -> list[ResendOutcome]:
        """Send each dead letter back to its original topic, unless it was resent before."""
        outcomes: list[ResendOutcome] = []
        done: set[str] = set()
        async with Producer(self.producer_group, instance=self.admin.instance,
                            send_msg_timeout=self.admin.timeout) as producer:  # fmt: skip
            for letter in letters:
                if letter.offset_msg_id in done:
                    continue  # named twice (by msgId and by offsetMsgId): one copy
                done.add(letter.offset_msg_id)
                outcomes.append(await self._resend_one(producer, letter))
        return outcomes

    async def resent_copy(self, letter: MessageExt) -> MessageExt | None:
        """The copy an earlier resend of ``letter`` stored in its original topic, if any."""
        topic = origin_topic(letter)
        if topic is None:
            return None
        try:
            copies = await self.admin.query_message(
                topic, letter.msg_id, unique_key=True, max_num=_COPIES_CHECKED
            )
        except MQClientError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise MQClientError(
                    exc.code,
                    f"dead letter {letter.msg_id} came from topic {topic}, which has no route "
                    "now; create the topic again (updateTopic) before resending",
                ) from exc
            raise
        for copy in copies:
            if copy.properties.get(DLQ_RESENT_FROM) == letter.offset_msg_id:
                return copy
        return None

    # -- internals ----------------------------------------------------------------------------

    async def _resend_one(self, producer: Producer, letter: MessageExt) -> ResendOutcome:
        topic = origin_topic(letter)
        if topic is None:
            return ResendOutcome(letter, ResendStatus.NO_ORIGIN_TOPIC, None)
        earlier = await self.resent_copy(letter)
        if earlier is not None:
            return ResendOutcome(
                letter, ResendStatus.ALREADY_RESENT, topic, earlier.offset_msg_id,
                earlier.queue_id, earlier.queue_offset,
            )  # fmt: skip
        properties = {k: v for k, v in letter.properties.items() if k not in _DROPPED_PROPERTIES}
        properties[DLQ_RESENT_FROM] = letter.offset_msg_id
        # The copy keeps the dead letter's client id: consumers see the msgId they failed on,
        # and the unique-key index finds the copy when a second resend checks.
        properties[MessageConst.UNIQ_KEY] = letter.msg_id
        copy = Message(topic, letter.decompressed_body(), properties=properties, flag=letter.flag)
        result = await producer.send(copy)
        await self._wait_indexed(letter)
        return ResendOutcome(
            letter, ResendStatus.RESENT, topic, result.offset_msg_id, result.queue.queue_id,
            result.queue_offset,
        )  # fmt: skip

    async def _wait_indexed(self, letter: MessageExt) -> None:
        """Wait (bounded) until the index finds the copy, so a resend run next sees it."""
        with anyio.move_on_after(self.admin.timeout):
            while await self.resent_copy(letter) is None:
                await anyio.sleep(0.05)
            return
        log.warning(
            "the copy of dead letter %s is not in the index of %s yet; a resend run at once "
            "might send it again", letter.msg_id, origin_topic(letter),
        )  # fmt: skip
