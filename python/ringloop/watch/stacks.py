"""Stack capture for the watchdog: the `StackSampler` seam and frame-tuple helpers.

A *sample* is a tuple of ``(filename, lineno, function)`` triples, innermost last, holding only
the frames the blocked callback owns: everything outside the loop's dispatcher (``run_forever``,
``_run_once``, ``Handle._run``, the watch's own wrapper, asyncio's runner) is trimmed off, so
what remains starts at the coroutine or callback that was dispatched.

Samples are plain tuples because the watchdog captures them on its own thread while the loop
thread keeps running: a live frame's ``f_lineno`` changes under our feet, so we copy the numbers
out at once and only build `traceback.FrameSummary` objects (which read source lines through
linecache, i.e. file I/O) later, on the loop thread, outside any watched slice.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import asyncio.runners
import functools
import os
import sys
import sysconfig
import traceback
from collections.abc import Iterable
from typing import Protocol

FrameTuple = tuple[str, int, str]
Sample = tuple[FrameTuple, ...]

_WATCH_DIR = os.path.dirname(os.path.abspath(__file__))
_ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__))
_STDLIB_DIRS = tuple(
    {os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")}
)
_SITE_DIRS = tuple(
    {os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
)

# Code objects at which the loop thread enters dispatch. Anything outward of (and including)
# these frames belongs to the loop, not to the callback being blamed.
_BOUNDARY_CODES: set = {
    asyncio.events.Handle._run.__code__,
    asyncio.base_events.BaseEventLoop._run_once.__code__,
    asyncio.base_events.BaseEventLoop.run_forever.__code__,
    asyncio.base_events.BaseEventLoop.run_until_complete.__code__,
    asyncio.runners.Runner.run.__code__,
    asyncio.runners.run.__code__,
}
_BOUNDARY_NAMES = {"run_forever", "run_until_complete", "_run_once"}


def add_boundary_code(code) -> None:
    """Mark a code object as loop dispatch machinery (the watch's own wrappers register here)."""
    _BOUNDARY_CODES.add(code)


def _is_boundary(code) -> bool:
    if code in _BOUNDARY_CODES:
        return True
    # ringloop's Python half (ringloop/loop.py) may drive dispatch from Python methods; trim
    # those by name so the native loop needs no registration step.
    fn = code.co_filename
    return code.co_name in _BOUNDARY_NAMES and fn.endswith(os.path.join("ringloop", "loop.py"))


def frames_of(frame) -> Sample:
    """Copy the callback-owned part of a live frame chain, innermost last."""
    out: list[FrameTuple] = []
    while frame is not None:
        code = frame.f_code
        if _is_boundary(code):
            break
        out.append((code.co_filename, frame.f_lineno or 0, code.co_name))
        frame = frame.f_back
    out.reverse()
    return tuple(out)


def frames_from_tuples(frames) -> Sample:
    """Trim a whole-thread stack given as (filename, lineno, name) tuples, outermost first
    (what the native sampler returns), to the callback-owned part: the frames after the loop's
    dispatch boundary (`run_forever` & co. in ringloop/loop.py or asyncio)."""
    start = 0
    for i, (filename, _lineno, name) in enumerate(frames):
        if name in _BOUNDARY_NAMES and (
            filename.endswith(os.path.join("ringloop", "loop.py")) or is_asyncio(filename)
        ):
            start = i + 1
    return tuple((f, int(n), name) for f, n, name in frames[start:])


class StackSampler(Protocol):
    """What the watchdog needs to look at the loop thread while it is blocked.

    `sample` is called on the watchdog thread. It returns the blocked thread's stack as a
    `Sample` (possibly empty when the thread is outside Python code) or None when the thread
    is gone. The native loop may provide a sampler that does not need the GIL; the Python one
    below does, which is why it cannot see inside a C call that holds the GIL.
    """

    def sample(self, thread_id: int) -> Sample | None: ...


class PythonStackSampler:
    """Samples through `sys._current_frames()` (needs the GIL; cheap: one dict of frames)."""

    def sample(self, thread_id: int) -> Sample | None:
        frame = sys._current_frames().get(thread_id)
        if frame is None:
            return None
        return frames_of(frame)


# Both run for every frame an audit event walks (on the loop thread, inside the slice), and
# os.path.abspath costs microseconds (string work, getcwd for relative names); the set of code
# filenames in a process is small and fixed, so the answers are memoised per filename.
@functools.lru_cache(maxsize=8192)
def is_library(filename: str) -> bool:
    """True for files of the standard library, installed packages or the watch itself."""
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    return (
        path.startswith(_STDLIB_DIRS) or path.startswith(_SITE_DIRS) or path.startswith(_WATCH_DIR)
    )


@functools.lru_cache(maxsize=8192)
def is_asyncio(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_ASYNCIO_DIR + os.sep)


def blamed_frame(sample: Sample) -> FrameTuple | None:
    """The frame to name as "the line that blocked": the innermost one outside library code.

    ``socket.create_connection`` blocks in socket.py, but the line a user must change is the
    one in their code that called it. Falls back to the innermost frame when every frame is
    library code (for example when the application itself is installed in site-packages).
    """
    for ft in reversed(sample):
        if not is_library(ft[0]):
            return ft
    return sample[-1] if sample else None


def summaries(sample: Iterable[FrameTuple]) -> list[traceback.FrameSummary]:
    """FrameSummary objects with their source lines loaded (does file I/O via linecache)."""
    out = []
    for filename, lineno, name in sample:
        fs = traceback.FrameSummary(filename, lineno, name, lookup_line=True)
        out.append(fs)
    return out


def format_location(ft: FrameTuple) -> str:
    filename, lineno, name = ft
    return f"{_short(filename)}:{lineno} in {name}"


def _short(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(".." + os.sep + "..") else rel
