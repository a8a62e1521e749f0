"""The leader a controller's CONTROLLER_NOT_LEADER remark names, as brokers and admin read it."""

from __future__ import annotations

import pytest

from protocol.headers import leader_named


@pytest.mark.parametrize(
    ("remark", "leader"),
    [
        ("this controller is not the leader; the leader is 127.0.0.1:9878", "127.0.0.1:9878"),
        (
            "leadership changed before the change committed; the leader is 10.0.0.2:9888; retry "
            "there",
            "10.0.0.2:9888",
        ),
        ("not the leader; the leader is ctl-1.example.org:9878", "ctl-1.example.org:9878"),
        ("not the leader; the leader is [::1]:9878", "[::1]:9878"),
        ("this controller is not the leader and no leader is elected yet; retry", None),
        ("this controller is not the leader; the leader is None", None),
        ("", None),
        (None, None),
    ],
)
def test_the_leader_named_in_a_not_leader_remark(remark: str | None, leader: str | None) -> None:
    assert leader_named(remark) == leader
