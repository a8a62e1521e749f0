"""The decoder fuzzer in CI: a short mutation run per target and hypothesis over the same targets.

Each target may raise only its documented decode error; anything else is a crash. A longer run
is ``python -m bench fuzz --inputs 1000000`` (figures in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import Target, fuzz_target, mutate_bytes, mutate_json, targets
from protocol import fastjson
from protocol.bodies import BodyError, ConsumerData

TARGETS = targets()
#: Inputs per target in CI: under a second each on a busy machine.
CI_INPUTS = 1000


def test_every_decoder_has_a_target() -> None:
    names = set(TARGETS)
    assert {"frame", "header", "record", "batch", "msgid", "fastjson", "properties"} <= names
    bodies = {name for name in names if name.startswith("body:")}
    assert {"body:HeartbeatData", "body:TopicRouteData", "body:ConsumeStats"} <= bodies
    assert len(bodies) >= 30
    for target in TARGETS.values():
        assert target.seeds, f"{target.name} has no seeds"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_short_mutation_run_finds_no_crash(name: str) -> None:
    report = fuzz_target(TARGETS[name], CI_INPUTS, seed=20261124)
    assert report.inputs == CI_INPUTS
    crashes = [f"{c.error} at {c.where} on {c.data[:80]!r}" for c in report.crashes.values()]
    assert not crashes, f"{name}: {crashes}"
    # Mutations must reach past the first check: some inputs are rejected, some accepted.
    assert 0 < report.rejected < report.inputs, f"{name}: rejected {report.rejected}"


def _check(target: Target, data: bytes) -> None:
    try:
        target.run(data)
    except target.accepted:
        pass


@pytest.mark.parametrize(
    "name", ["frame", "header", "record", "batch", "msgid", "fastjson", "properties"]
)
@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(data=st.binary(max_size=512), seed_index=st.integers(0, 1000), cut=st.integers(0, 600))
def test_hypothesis_bytes_and_cut_seeds(name: str, data: bytes, seed_index: int, cut: int) -> None:
    target = TARGETS[name]
    seed = target.seeds[seed_index % len(target.seeds)]
    _check(target, data)
    _check(target, seed[:cut] + data)  # a real input cut short and continued with noise


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    index=st.integers(0, 10_000),
    keys=st.lists(st.integers(0, 200), max_size=6),
    values=st.lists(_JSON, min_size=6, max_size=6),
)
def test_hypothesis_every_body_with_its_own_keys(
    index: int, keys: list[int], values: list[object]
) -> None:
    """Objects built from the class's own wire keys with values of any JSON type."""
    bodies = [t for name, t in sorted(TARGETS.items()) if name.startswith("body:")]
    target = bodies[index % len(bodies)]
    doc: dict[str, object] = {}
    for n, key in enumerate(keys):
        if target.wire_keys:
            doc[target.wire_keys[key % len(target.wire_keys)]] = values[n]
    _check(target, json.dumps(doc).encode())


def test_mutations_are_deterministic_and_bounded() -> None:
    seed = TARGETS["frame"].seeds[0]
    first = [mutate_bytes(random.Random(5), seed, [seed]) for _ in range(3)]
    again = [mutate_bytes(random.Random(5), seed, [seed]) for _ in range(3)]
    assert first == again
    assert mutate_json(random.Random(1), b"not json", []) is None
    mutated = mutate_json(random.Random(1), b'{"a": [1, 2]}', ["topic"])
    assert mutated is not None and mutated != b'{"a": [1, 2]}'


#: Inputs aimed at the spots where a decoder could raise something other than its own error:
#: numbers past float and int-string limits, nesting past the recursion limit, lone
#: surrogates, lengths at the 32-bit edges. Each must be accepted or rejected cleanly.
HOSTILE: list[tuple[str, bytes]] = [
    ("body:OffsetWrapper", b'{"consumeTps": 1' + b"0" * 400 + b"}"),
    ("body:OffsetWrapper", b'{"consumeTps": "1e999", "brokerOffset": 1e999}'),
    ("body:QueueData", b'{"brokerName": "b", "readQueueNums": "' + b"9" * 5000 + b'"}'),
    ("body:QueueData", b'{"brokerName": "b", "perm": 1' + b"0" * 5000 + b"}"),
    ("body:TopicRouteData", b'{"brokerDatas": [{"brokerAddrs": {"x": "a"}}]}'),
    ("body:ConsumeStats", b'{"offsetTable": {{"topic": [], "brokerName": {}}: {}}}'),
    (
        "body:HeartbeatData",
        b'{"clientID": "\\ud800", "consumerDataSet": [{"subscriptionDataSet": 7}]}',
    ),
    ("fastjson", b"[" * 100_000),
    ("fastjson", b'{"a": "\\ud800\\udc00\\udc00"}'),
    ("fastjson", b"{" + b"a:{" * 5000),
    ("header", b'11\n{"queueId": 1e300, "consumerGroup": ["g"], "topic": {"t": 1}}'),
    ("header", b'310\n{"b": "T", "a": "' + b"9" * 5000 + b'"}'),
    ("frame", b"\x7f\xff\xff\xff\x00\x00\x00\x00"),
    ("frame", b"\x00\x00\x00\x08\x01\xff\xff\xff\x00\x00\x00\x00"),
    ("record", b"\x00\x00\x00\x60" + b"\xda\xa3\x20\xa7" + b"\xff" * 88),
    ("batch", b"\x7f\xff\xff\xff" + b"\x00" * 16),
    ("msgid", "é".encode() * 16),
    ("properties", b"key=\\u12\nk\\\n"),
    ("properties", b"\xff\xfe=\\uZZZZ"),
]


@pytest.mark.parametrize(
    ("name", "data"), HOSTILE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(HOSTILE)]
)
def test_hostile_input_is_accepted_or_rejected_cleanly(name: str, data: bytes) -> None:
    _check(TARGETS[name], data)


# -- crashes the fuzzer found, kept as regression cases -----------------------------------------


def test_regression_fastjson_integer_past_the_digit_limit_is_a_decode_error() -> None:
    """Found by ``python -m bench fuzz --seed 7``: a bare-key object with a 5,000-digit integer
    made ``fastjson.loads`` raise int()'s plain ValueError, not its FastjsonDecodeError."""
    data = b"{tps: " + b"9" * 5000 + b"}"
    with pytest.raises(fastjson.FastjsonDecodeError, match="integer of 5000 digits is too long"):
        fastjson.loads(data)
    _check(TARGETS["fastjson"], data)
    assert fastjson.loads(b"{tps: " + b"9" * 40 + b"}") == {"tps": int("9" * 40)}


@pytest.mark.parametrize(
    "data",
    [
        b'{"groupName": "g", "subscriptionDataSet": "' + b"9" * 5000 + b'"}',
        b'{"groupName": "g", "subscriptionDataSet": [' + b"1," * 5000 + b"1]}",
    ],
    ids=["string-for-a-list", "five-thousand-bad-elements"],
)
def test_regression_a_bad_list_is_refused_at_once_with_one_short_error(data: bytes) -> None:
    """Found by ``python -m bench fuzz --seed 7`` as a slow input (1.8 s for 5 KB): cattrs
    turned a string into a list of characters and, with detailed validation, tried every
    element and kept every error (a 379 KB message). Now an array is required and the first
    bad element ends the decode."""
    with pytest.raises(BodyError) as caught:
        ConsumerData.from_json(data)
    message = str(caught.value)
    assert "subscription_data_set" in message and len(message) < 500, message[:600]
    assert ConsumerData.from_json(b'{"groupName": "g", "subscriptionDataSet": []}').group_name


def test_regression_fastjson_object_key_with_mixed_names_does_not_raise_type_error() -> None:
    """Found by ``python -m bench.fuzz_atheris fastjson``: an object used as a map key whose
    own names mix a string and an object key could not be sorted (TypeError)."""
    doc = fastjson.loads(b'{{{"a":1}:1, "b":2}:3}')
    [(key, value)] = doc.items()
    assert value == 3 and isinstance(key, fastjson.ObjectKey)
    assert key == fastjson.loads(b'{{"b":2, {"a":1}:1}:3}').popitem()[0]  # order-independent
    _check(TARGETS["fastjson"], b'{{{"a":1}:1, "b":2}:3}')
    # Plain names keep their text order: a MessageQueue key reads as before.
    mq = fastjson.ObjectKey.of({"topic": "t", "brokerName": "b", "queueId": 1})
    assert [name for name, _ in mq] == ["brokerName", "queueId", "topic"]
