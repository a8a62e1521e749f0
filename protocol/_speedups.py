"""Stands in for the optional compiled module ``protocol/_speedups.pyx`` while it is not built.

Python loads an extension module before a source file of the same name, so once an install
(``hatch_build.py``) or ``./dev build-ext`` has built ``_speedups.<platform>.so`` beside this
file, that is what ``import protocol._speedups`` gets. Without it this file is imported and
raises ImportError, and the codecs keep their pure-Python code (`protocol.codecs_status` says
so).
"""

raise ImportError("protocol._speedups is not built; ./dev build-ext builds it")
