"""run_forever / run_until_complete / stop / close / is_running / is_closed, re-entrancy
errors, the closed loop, and BaseException (KeyboardInterrupt / SystemExit) escaping a run.

asyncio facts encoded here:

* ``stop()`` finishes the current batch of ready callbacks; callbacks they queue run only at
  the next run.  ``stop()`` before ``run_forever()`` makes it run exactly one iteration, without
  blocking on pending timers.
* A BaseException raised by a callback leaves the run at once; callbacks queued behind it are
  not lost, they run at the next run.
* On a closed loop the scheduling and running methods raise ``RuntimeError("Event loop is
  closed")``; ``close()`` again, ``is_closed()``, ``time()``, ``get_debug()`` and the
  ``remove_*`` methods (which return False) still work.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import pytest
from loop_helpers import run_forever_with_watchdog

pytestmark = pytest.mark.timeout(30)


def test_run_until_complete_returns_result_and_raises(loop):
    async def ok():
        await asyncio.sleep(0)
        return 42

    async def bad():
        await asyncio.sleep(0)
        raise ValueError("boom")

    assert loop.run_until_complete(ok()) == 42
    with pytest.raises(ValueError, match="boom"):
        loop.run_until_complete(bad())
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "fut")
    assert loop.run_until_complete(fut) == "fut"
    task = loop.create_task(ok())
    assert loop.run_until_complete(task) == 42
    assert not loop.is_running()


def test_run_until_complete_non_awaitable_is_type_error(loop):
    with pytest.raises(TypeError):
        loop.run_until_complete(42)


def test_run_until_complete_future_of_other_loop(loop, new_loop):
    other = new_loop()
    fut = other.create_future()
    with pytest.raises(ValueError):
        loop.run_until_complete(fut)
    assert not loop.is_running()


def test_run_until_complete_stopped_early(loop):
    async def stopper():
        loop.stop()
        await asyncio.sleep(0.05)

    with pytest.raises(RuntimeError, match="stopped before Future completed"):
        loop.run_until_complete(stopper())
    # The loop is still usable, and the leftover task can be finished.
    assert loop.run_until_complete(asyncio.sleep(0, "again")) == "again"


def test_is_running_and_is_closed(loop):
    seen = []
    assert not loop.is_running() and not loop.is_closed()
    loop.call_soon(lambda: seen.append(loop.is_running()))
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert seen == [True]
    assert not loop.is_running()
    loop.close()
    assert loop.is_closed() and not loop.is_running()
    loop.close()  # idempotent
    assert loop.is_closed()


def test_stop_inside_callback_finishes_current_batch(loop):
    out = []

    def b():
        out.append("b")
        loop.call_soon(out.append, "c")  # next iteration: only at the next run

    loop.call_soon(out.append, "a")
    loop.call_soon(loop.stop)
    loop.call_soon(b)
    assert not run_forever_with_watchdog(loop)
    assert out == ["a", "b"]
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == ["a", "b", "c"]


def test_stop_before_run_forever_runs_one_iteration(loop):
    out = []
    loop.call_later(10, out.append, "far-timer")

    def first():
        out.append(1)
        loop.call_soon(out.append, "next-iteration")

    loop.stop()
    loop.call_soon(first)
    loop.call_soon(out.append, 2)
    loop.run_forever()
    # Had it waited for the far timer, "far-timer" would be in `out`.
    assert out == [1, 2], "stop() before run_forever must not wait for timers"
    loop.stop()
    loop.run_forever()
    assert out == [1, 2, "next-iteration"]


def test_stop_twice_before_run_is_one_stop(loop):
    out = []
    loop.stop()
    loop.stop()
    loop.call_soon(out.append, 1)
    loop.run_forever()
    loop.call_soon(out.append, 2)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == [1, 2]


def test_run_forever_while_running(loop):
    errors = []

    def reenter():
        try:
            loop.run_forever()
        except RuntimeError as exc:
            errors.append(str(exc))
        loop.stop()

    loop.call_soon(reenter)
    assert not run_forever_with_watchdog(loop)
    assert len(errors) == 1 and "already running" in errors[0]


def test_run_until_complete_while_running(loop):
    async def main():
        coro = asyncio.sleep(0)
        try:
            with pytest.raises(RuntimeError, match="already running"):
                loop.run_until_complete(coro)
        finally:
            coro.close()
        return "survived"

    assert loop.run_until_complete(main()) == "survived"


def test_close_while_running(loop):
    errors = []

    def closer():
        try:
            loop.close()
        except RuntimeError as exc:
            errors.append(exc)
        loop.stop()

    loop.call_soon(closer)
    assert not run_forever_with_watchdog(loop)
    assert len(errors) == 1
    assert not loop.is_closed()


@pytest.mark.skip_kinds(
    "asyncio",
    condition=sys.version_info >= (3, 13),
    reason="CPython 3.13's second attempt runs the other loop instead of refusing (hangs)",
)
def test_nested_run_of_another_loop(loop, new_loop):
    other = new_loop()
    msgs = []

    async def main():
        for attempt in (other.run_forever, lambda: other.run_until_complete(other.create_future())):
            try:
                attempt()
            except RuntimeError as exc:
                msgs.append(str(exc))
        return "done"

    assert loop.run_until_complete(main()) == "done"
    assert len(msgs) == 2
    for m in msgs:
        assert "Cannot run the event loop while another loop is running" in m
    # The other loop was not damaged by the refused attempt.
    assert other.run_until_complete(asyncio.sleep(0, "other ok")) == "other ok"


def test_get_running_loop_inside_coroutine(loop):
    async def main():
        return asyncio.get_running_loop(), asyncio.get_event_loop()

    assert loop.run_until_complete(main()) == (loop, loop)


@pytest.mark.parametrize(
    "name, call",
    [
        ("call_soon", lambda lp, s: lp.call_soon(print)),
        ("call_later", lambda lp, s: lp.call_later(1, print)),
        ("call_at", lambda lp, s: lp.call_at(1, print)),
        ("call_soon_threadsafe", lambda lp, s: lp.call_soon_threadsafe(print)),
        ("run_forever", lambda lp, s: lp.run_forever()),
        ("run_until_complete", lambda lp, s: lp.run_until_complete(lp.create_future())),
        ("add_reader", lambda lp, s: lp.add_reader(s, print)),
        ("add_writer", lambda lp, s: lp.add_writer(s, print)),
        ("add_signal_handler", lambda lp, s: lp.add_signal_handler(signal.SIGUSR1, print)),
        ("run_in_executor", lambda lp, s: lp.run_in_executor(None, print)),
    ],
)
def test_closed_loop_raises(loop, name, call):
    a, b = socket.socketpair()
    try:
        loop.close()
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            call(loop, a)
    finally:
        a.close()
        b.close()


def test_closed_loop_create_task_raises_and_coro_is_not_leaked(loop):
    loop.close()
    coro = asyncio.sleep(0)
    try:
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            loop.create_task(coro)
    finally:
        coro.close()


def test_closed_loop_harmless_methods(loop):
    a, b = socket.socketpair()
    try:
        loop.close()
        loop.close()
        assert loop.is_closed()
        assert isinstance(loop.time(), float)
        assert loop.get_debug() in (True, False)
        assert loop.remove_reader(a) is False
        assert loop.remove_writer(a) is False
        assert loop.remove_signal_handler(signal.SIGUSR1) is False
    finally:
        a.close()
        b.close()


def test_keyboard_interrupt_in_callback_propagates_and_loop_is_reusable(loop):
    out = []

    def interrupt():
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    loop.call_soon(out.append, "queued-behind")
    with pytest.raises(KeyboardInterrupt):
        run_forever_with_watchdog(loop)
    assert not loop.is_running()
    assert out == []  # the run stopped at the raising callback...
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == ["queued-behind"]  # ...and the queued callback was not lost
    assert loop.run_until_complete(asyncio.sleep(0, "usable")) == "usable"


def test_system_exit_in_timer_propagates(loop):
    def leave():
        raise SystemExit(7)

    loop.call_later(0.001, leave)
    with pytest.raises(SystemExit) as info:
        run_forever_with_watchdog(loop)
    assert info.value.code == 7
    assert not loop.is_running()
    assert loop.run_until_complete(asyncio.sleep(0.001, "usable")) == "usable"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_base_exception_in_coroutine_leaves_run_until_complete(loop, exc_type):
    async def main():
        await asyncio.sleep(0)
        raise exc_type()

    with pytest.raises(exc_type):
        loop.run_until_complete(main())
    assert not loop.is_running()
    assert loop.run_until_complete(asyncio.sleep(0, "usable")) == "usable"


def test_close_with_pending_callbacks_and_timers(new_loop):
    lp = new_loop()
    out = []
    lp.call_soon(out.append, 1)
    lp.call_later(0.01, out.append, 2)
    lp.close()
    assert lp.is_closed()
    assert out == []


def test_close_releases_every_fd_at_once(new_loop):
    """close() gives back every fd the loop opened (ring or epoll set, eventfd, signal
    socketpair) without waiting for the garbage collector, as asyncio's close does."""
    import gc
    import os

    gc.collect()
    before = set(os.listdir("/proc/self/fd"))
    lp = new_loop()
    lp.run_until_complete(asyncio.sleep(0))
    opened = set(os.listdir("/proc/self/fd")) - before
    assert opened, "a loop opens at least one fd"
    lp.close()
    still_open = opened & set(os.listdir("/proc/self/fd"))
    assert not still_open, f"fds left open after close(): {sorted(still_open)}"
    del lp
