"""Fixtures of this directory's tests; the helpers they use are in helpers.py."""

from .helpers import make_config, open_store, store_root

__all__ = ["make_config", "open_store", "store_root"]
