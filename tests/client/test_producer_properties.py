"""The producer's properties string: the plain-message shortcut equals the general path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from client.message import Message
from client.producer import properties_with_id
from protocol.message import MessageConst, properties_to_string

_word = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)))


@settings(deadline=None)
@given(
    tags=st.none() | _word,
    keys=st.none() | _word | st.lists(_word, max_size=3),
    properties=st.dictionaries(_word, _word, max_size=3),
    delay=st.integers(0, 3),
    deliver=st.none() | st.integers(0, 2**40),
    wait=st.booleans(),
    uniq=st.text(min_size=1, max_size=32, alphabet="0123456789ABCDEF"),
)
def test_properties_with_id_equals_wire_properties_plus_uniq_key(
    tags: str | None,
    keys: str | list[str] | None,
    properties: dict[str, str],
    delay: int,
    deliver: int | None,
    wait: bool,
    uniq: str,
) -> None:
    message = Message(
        "T", b"x", tags=tags, keys=keys, properties=properties, delay_level=delay,
        deliver_time_ms=deliver, wait_store_msg_ok=wait,
    )  # fmt: skip
    props = message.wire_properties()
    props[MessageConst.UNIQ_KEY] = uniq
    assert properties_with_id(message, uniq) == properties_to_string(props)


def test_plain_message_properties() -> None:
    assert properties_with_id(Message("T", b"x"), "AB") == "WAIT\x01true\x02UNIQ_KEY\x01AB"
