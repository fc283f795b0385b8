"""Debug mode: get/set_debug, the slow-callback warning, and the thread-safety check.

asyncio facts encoded here:

* ``get_debug()`` defaults to asyncio's environment rule (``-X dev`` / ``PYTHONASYNCIODEBUG``);
* in debug mode a callback running longer than ``slow_callback_duration`` (default 0.1 s) is
  logged at WARNING on the ``asyncio`` logger as "Executing <handle> took N.NNN seconds";
* in debug mode, calling a non-threadsafe method (call_soon, call_later, call_at) from a thread
  other than the one running the loop raises RuntimeError.
"""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
from loop_helpers import PROMPT, debug_from_environment, run_forever_with_watchdog

pytestmark = pytest.mark.timeout(30)

SLOW_RE = re.compile(r"Executing .+ took \d+\.\d+ seconds")


def test_get_set_debug(loop):
    assert loop.get_debug() is debug_from_environment()
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_slow_callback_duration_default(loop):
    assert loop.slow_callback_duration == pytest.approx(0.1)
    loop.slow_callback_duration = 0.25
    assert loop.slow_callback_duration == pytest.approx(0.25)


def _slow_warnings(caplog):
    return [r for r in caplog.records if r.name == "asyncio" and SLOW_RE.search(r.getMessage())]


def test_slow_callback_logged_in_debug(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01
    loop.call_soon(time.sleep, 0.05)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    slow = _slow_warnings(caplog)
    assert len(slow) == 1, [r.getMessage() for r in caplog.records]
    assert slow[0].levelno == logging.WARNING
    took = float(re.search(r"took (\d+\.\d+) seconds", slow[0].getMessage()).group(1))
    assert took >= 0.045


def test_slow_timer_callback_logged_in_debug(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01
    loop.call_later(0.001, time.sleep, 0.05)
    loop.call_later(0.1, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert len(_slow_warnings(caplog)) == 1


def test_fast_callbacks_not_logged(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 1.0
    for _ in range(100):
        loop.call_soon(lambda: None)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert _slow_warnings(caplog) == []


def test_slow_callback_not_logged_without_debug(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(False)
    loop.slow_callback_duration = 0.01
    loop.call_soon(time.sleep, 0.05)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert _slow_warnings(caplog) == []


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at"])
def test_non_threadsafe_call_from_other_thread_raises_in_debug(loop, method):
    loop.set_debug(True)
    results = []
    calls = {
        "call_soon": lambda: loop.call_soon(print),
        "call_later": lambda: loop.call_later(10, print),
        "call_at": lambda: loop.call_at(loop.time() + 10, print),
    }

    def from_thread():
        try:
            calls[method]()
        except RuntimeError as exc:
            results.append(exc)
        else:
            results.append(None)
        loop.call_soon_threadsafe(loop.stop)

    def start():
        threading.Thread(target=from_thread, daemon=True).start()

    loop.call_soon(start)
    assert not run_forever_with_watchdog(loop, PROMPT)
    assert len(results) == 1 and isinstance(results[0], RuntimeError), results
    assert "thread" in str(results[0]).lower()
