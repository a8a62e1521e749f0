"""argparse value types shared by the sub-commands: one wording for every bad number."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number above 0 (counts, sizes, intervals in whole seconds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 (timeouts, refresh intervals)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def non_negative_seconds(text: str) -> float:
    """A number of seconds, 0 allowed (0 meaning "no wait" or "no limit" where the flag says)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or above")
    return value


def ratio(text: str) -> float:
    """A fraction above 0 and at most 1 (alert thresholds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a ratio such as 0.9") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 1")
    return value
