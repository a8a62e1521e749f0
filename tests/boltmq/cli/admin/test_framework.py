"""The verb framework: every verb's --help has its example; -n defaults to $NAMESRV_ADDR."""

from __future__ import annotations

from typing import Any

import pytest

from boltmq import cli
from boltmq.cli.admin._verbs import VERBS
from tests.boltmq.cli.admin.helpers import run_admin

PART_ONE = {
    "clusterList", "brokerStatus", "getBrokerConfig", "updateBrokerConfig", "topicList",
    "topicRoute", "topicStatus", "updateTopic", "deleteTopic", "updateTopicPerm",
    "updateSubGroup", "deleteSubGroup", "consumerProgress", "consumerConnection",
    "producerConnection", "resetOffsetByTime", "cloneGroupOffset", "skipAccumulatedMessage",
    "statsAll", "updateKvConfig", "deleteKvConfig", "getNamesrvConfig", "wipeWritePerm",
    "addWritePerm",
}  # fmt: skip


def test_every_verb_has_help_with_its_example(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    assert set(VERBS) >= PART_ONE
    for name, verb in VERBS.items():
        assert cli.main(["admin", name, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: boltmq admin {name}")
        assert f"example:\n  {verb.example}" in out
        assert verb.example.startswith(f"boltmq admin {name} ")
        for flag in ("--namesrvAddr", "--json", "--timeout", "--debug"):
            assert flag in out
        assert "$NAMESRV_ADDR or 127.0.0.1:9876; now 127.0.0.1:9876" in " ".join(out.split())


def test_namesrv_defaults_to_the_environment(
    cluster: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", cluster.namesrv)
    code, out, err = run_admin(capsys, None, "topicList", "--json")
    assert code == 0, err
    assert "TBW102" in out


def test_admin_without_a_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_admin(capsys, None)
    assert (code, out) == (2, "")
    assert "clusterList" in err and "consumerProgress" in err
