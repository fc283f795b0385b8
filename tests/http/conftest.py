"""Fixtures of the server-process tests: `serve` (see `serve_helpers`)."""

from serve_helpers import serve

__all__ = ["serve"]
