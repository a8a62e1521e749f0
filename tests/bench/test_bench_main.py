"""``python -m bench``: a benchmark's own --help, and the runner's."""

from __future__ import annotations

import pytest

from bench.__main__ import main


def test_a_named_benchmark_shows_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: python -m bench compare" in out and "--rocketmq-home" in out


def test_without_one_name_help_is_the_runners(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: python -m bench [--quick] [-h] [name ...]" in capsys.readouterr().out


def test_an_unknown_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nosuch", "--help"])
    assert exc.value.code == 2
    assert "unknown benchmark 'nosuch'" in capsys.readouterr().err
