"""What the data source raises: a bad option, lost messages, a failed write.

Spark shows a Python data source's exception inside its own (a PythonException or an
AnalysisException whose text carries the Python traceback), so every message here names the
option, topic, broker, queue and offsets it is about: that text is all the user sees.
"""

from __future__ import annotations


class BoltMQSourceError(Exception):
    """Base of the data source's own errors."""


class OptionError(BoltMQSourceError, ValueError):
    """An unknown option, a missing one, or a value it cannot take; the message names it."""


class DataLossError(BoltMQSourceError):
    """Messages a read was asked for are gone (retention deleted them) or were never written;
    raised while ``failOnDataLoss`` is true (the default)."""


class WriteError(BoltMQSourceError):
    """A row that cannot become a message, or a send the brokers refused."""
