"""The optional compiled codec module, for the tests that compare it with the pure code.

``./dev test`` builds it first (``./dev build-ext``); where it is absent those tests skip and
the pure code is what every other test runs.
"""

from __future__ import annotations

import pytest

try:
    from protocol import _speedups as speedups
except ImportError:
    speedups = None  # type: ignore[assignment]

#: Marks a test (or a module, as ``pytestmark``) that needs the compiled module.
needs_compiled = pytest.mark.skipif(
    speedups is None, reason="protocol._speedups is not built (./dev build-ext builds it)"
)
