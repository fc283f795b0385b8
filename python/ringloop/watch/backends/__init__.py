"""Backends: how a loop's slices get timed. One per kind of loop.

Each backend owns a `SliceState` (``.state``) and provides:

- ``start()`` / ``stop()``: begin and end timing this loop's slices;
- ``retune(threshold_ns)``: the lowest consumer threshold changed;
- ``io_noted()``: the audit sink recorded the first I/O event of a slice (the native backend
  uses it to report strict-mode events from slices shorter than its reporting threshold);
- ``name``: shown in reports.

At the end of a slice that lasted at least ``state.slow_ns`` or did audited I/O, the backend
calls ``state.on_slow(handle, start_ns, end_ns)`` on the loop thread.

Selection (`select_backend`): ringloop's native loop when it exposes the watch hooks; stock
asyncio loops (anything deriving from ``asyncio.BaseEventLoop``) by wrapping
``Handle._run``; anything else, uvloop included, by heartbeat. ``RINGLOOP_WATCH_BACKEND``
(``ringloop``, ``asyncio``, ``heartbeat``) forces a choice where it can apply.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from .asyncio_handles import AsyncioBackend
from .heartbeat import HeartbeatBackend
from .native import NativeBackend


def forced_backend() -> str | None:
    """The backend ``RINGLOOP_WATCH_BACKEND`` forces, if any."""
    return os.environ.get("RINGLOOP_WATCH_BACKEND") or None


def _has_native_hooks(loop: Any) -> bool:
    return (
        type(loop).__module__.startswith("ringloop")
        and hasattr(loop, "_watch_set")
        and hasattr(loop, "_slice_seq")
        and hasattr(loop, "_slice_start_ns")
    )


def select_backend(loop: Any, monitor: Any):
    forced = forced_backend()
    if forced == "heartbeat":
        return HeartbeatBackend(loop, monitor)
    if _has_native_hooks(loop) and forced in (None, "ringloop"):
        return NativeBackend(loop, monitor)
    if type(loop).__module__.startswith("ringloop"):
        # A ringloop loop without the hooks dispatches natively: Handle._run never runs.
        return HeartbeatBackend(loop, monitor)
    if isinstance(loop, asyncio.BaseEventLoop):
        return AsyncioBackend(loop, monitor)
    return HeartbeatBackend(loop, monitor)
