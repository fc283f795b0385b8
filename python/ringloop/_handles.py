"""repr() of ringloop's native Handle/TimerHandle, in asyncio's format.

Kept in Python because it is only used for debugging output and must track
asyncio's own formatting helpers from one Python version to the next.
"""

from __future__ import annotations

from asyncio import format_helpers


def callback_source(callback, args) -> str:
    """`func(arg, ...) at file.py:12`, as asyncio prints callbacks."""
    fmt = getattr(format_helpers, "_format_callback_source", None)
    if fmt is None or callback is None:
        return repr(callback)
    return fmt(callback, args if args is not None else ())


def handle_repr(handle) -> str:
    info = [type(handle).__name__]
    if handle._cancelled:
        info.append("cancelled")
    when = getattr(handle, "_when", None)
    if when is not None:
        info.append(f"when={when}")
    if handle._callback is not None:
        info.append(callback_source(handle._callback, handle._args))
    tb = handle._source_traceback
    if tb:
        frame = tb[-1]
        info.append(f"created at {frame[0]}:{frame[1]}")
    return "<{}>".format(" ".join(info))
