"""Small helpers shared by the loop tests (imported as ``loop_helpers``; not a test module)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

# Upper bound for "this must happen promptly": far above any sane latency on a loaded 2-core
# CI box, far below the per-test timeout, so a hang is reported as a failure with context.
PROMPT = 5.0


def debug_from_environment() -> bool:
    """asyncio's default debug flag for this process (-X dev / PYTHONASYNCIODEBUG)."""
    return bool(
        sys.flags.dev_mode
        or (not sys.flags.ignore_environment and os.environ.get("PYTHONASYNCIODEBUG"))
    )


def run_with_timeout(loop: asyncio.AbstractEventLoop, aw, timeout: float = PROMPT):
    """Run ``aw`` on ``loop`` but give up (TimeoutError) after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(aw, timeout))


def run_forever_with_watchdog(loop: asyncio.AbstractEventLoop, timeout: float = PROMPT) -> bool:
    """run_forever, stopping the loop after ``timeout`` s. Returns True if the watchdog fired."""
    fired = []

    def bark():
        fired.append(True)
        loop.stop()

    dog = loop.call_later(timeout, bark)
    try:
        loop.run_forever()
    finally:
        dog.cancel()
    return bool(fired)


def start_thread(target, *args) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def when_running(loop: asyncio.AbstractEventLoop) -> threading.Event:
    """An Event set from the first callback once ``loop`` runs (for threads that poke it)."""
    ev = threading.Event()
    loop.call_soon(ev.set)
    return ev
