"""The soak in CI: 30 s of load on a master/slave cluster of node processes through a master and
a slave restart, then the exact accounting (``python -m bench soak`` runs it for 10 minutes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Ledger, account, report, soak

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
async def test_thirty_seconds_of_soak_lose_nothing_and_explain_every_duplicate(
    tmp_path: Path,
) -> None:
    verdict = await soak(tmp_path, duration=30, rate=20, drain=90)
    text = report(verdict)
    assert verdict.ok, text
    assert not verdict.lost and verdict.consumed == verdict.acked, text
    assert verdict.acked > 500, text
    assert verdict.by_retry > 0, text  # the listener's RECONSUME_LATER answers came back
    assert verdict.duplicates == verdict.by_retry + verdict.by_restart, text


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.acked = {"a", "b", "c"}
    ledger.deliveries.update({"a": [1.0], "b": [2.0, 3.0], "c": [4.0, 200.0]})
    return ledger


def test_accounting_explains_a_duplicate_by_a_retry_or_a_restart_and_nothing_else() -> None:
    ledger = _ledger()
    ledger.retried["b"] = 1
    verdict = account(ledger)
    assert verdict.duplicates == 2 and verdict.by_retry == 1
    assert verdict.unexplained == ["c"] and not verdict.ok  # no restart near "c"

    ledger.restarts.append(("broker-a-0", 100.0, 110.0))
    verdict = account(ledger)
    assert verdict.by_restart == 1 and verdict.unexplained == [] and verdict.ok


def test_accounting_reports_a_loss_and_a_rolled_back_delivery() -> None:
    ledger = _ledger()
    ledger.retried["b"] = 1
    ledger.restarts.append(("broker-a-1", 100.0, 110.0))
    ledger.acked.add("lost-1")
    ledger.rolled_back.add("a")
    verdict = account(ledger)
    assert verdict.lost == ["lost-1"] and verdict.rolled_back_delivered == ["a"]
    assert not verdict.ok
    assert "LOST" in report(verdict) and "soak: FAILED" in report(verdict)


def test_accounting_reports_an_unknown_transaction_never_checked() -> None:
    ledger = _ledger()
    ledger.retried.update({"b": 1})
    ledger.restarts.append(("broker-a-0", 100.0, 110.0))
    ledger.pending_tx.add("tx-7")
    verdict = account(ledger)
    assert verdict.unresolved == ["tx-7"] and not verdict.ok
    assert "NEVER CHECKED" in report(verdict)
