"""add_signal_handler / remove_signal_handler.

asyncio facts encoded here:

* handlers run as ordinary callbacks on the loop thread, with their args;
* a signal arriving while the loop is blocked in its wait wakes it at once;
* ``remove_signal_handler`` returns True/False and restores ``SIG_DFL`` (``default_int_handler``
  for SIGINT); ``close()`` removes every handler and resets ``signal.set_wakeup_fd``;
* bad signals: 0 or out of range -> ValueError, SIGKILL/SIGSTOP -> RuntimeError, a non-int ->
  TypeError, a coroutine function -> TypeError; from a non-main thread -> RuntimeError.

The ``sig_guard`` fixture installs Python handlers for SIGUSR1/SIGUSR2 first, so a loop that
fails to install its own handler makes the test fail instead of killing pytest, and restores
the original dispositions and wakeup fd afterwards.  Request it *before* ``loop``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from loop_helpers import PROMPT, run_forever_with_watchdog, start_thread, when_running

pytestmark = pytest.mark.timeout(30)

GUARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)


@pytest.fixture
def sig_guard():
    saved = {s: signal.getsignal(s) for s in GUARDED}
    stray = []

    def catch(signum, frame):
        stray.append(signum)

    signal.signal(signal.SIGUSR1, catch)
    signal.signal(signal.SIGUSR2, catch)
    try:
        yield stray
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(-1)


def _kill(sig):
    os.kill(os.getpid(), sig)


def test_handler_runs_on_loop_with_args(sig_guard, loop):
    seen = []

    def handler(*args):
        seen.append((args, threading.get_ident(), loop.is_running()))
        loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, handler, "a", 2)
    loop.call_soon(_kill, signal.SIGUSR1)
    assert not run_forever_with_watchdog(loop)
    assert seen == [(("a", 2), threading.get_ident(), True)]
    assert sig_guard == []


def test_two_signals_two_handlers(sig_guard, loop):
    seen = set()

    def handler(sig):
        seen.add(sig)
        if len(seen) == 2:
            loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, handler, signal.SIGUSR1)
    loop.add_signal_handler(signal.SIGUSR2, handler, signal.SIGUSR2)
    loop.call_soon(_kill, signal.SIGUSR1)
    loop.call_soon(_kill, signal.SIGUSR2)
    assert not run_forever_with_watchdog(loop)
    assert seen == {signal.SIGUSR1, signal.SIGUSR2}


def test_replacing_handler(sig_guard, loop):
    seen = []
    loop.add_signal_handler(signal.SIGUSR1, seen.append, "old")
    loop.add_signal_handler(signal.SIGUSR1, lambda: (seen.append("new"), loop.stop()))
    loop.call_soon(_kill, signal.SIGUSR1)
    assert not run_forever_with_watchdog(loop)
    assert seen == ["new"]


def test_handler_exception_goes_to_exception_handler(sig_guard, loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def bad():
        loop.call_soon(loop.stop)
        raise ZeroDivisionError

    loop.add_signal_handler(signal.SIGUSR1, bad)
    loop.call_soon(_kill, signal.SIGUSR1)
    assert not run_forever_with_watchdog(loop)
    assert len(contexts) == 1 and isinstance(contexts[0]["exception"], ZeroDivisionError)


def test_signal_wakes_blocked_loop_promptly(sig_guard, loop):
    woke = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: (woke.append(time.monotonic()), loop.stop()))
    loop.call_later(30, loop.stop)
    running = when_running(loop)
    sent = []

    def sender():
        running.wait(PROMPT)
        time.sleep(0.1)  # let the loop block in its wait (the test holds either way)
        sent.append(time.monotonic())
        _kill(signal.SIGUSR1)

    t = start_thread(sender)
    loop.run_forever()
    t.join(PROMPT)
    assert woke, "signal handler never ran"
    assert woke[0] - sent[0] < PROMPT
    assert sig_guard == []


def test_remove_signal_handler(sig_guard, loop):
    loop.add_signal_handler(signal.SIGUSR1, print)
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert loop.remove_signal_handler(signal.SIGUSR1) is False
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert loop.remove_signal_handler(signal.SIGUSR2) is False


def test_remove_sigint_restores_default_int_handler(sig_guard, loop):
    loop.add_signal_handler(signal.SIGINT, print)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_removed_handler_no_longer_runs(sig_guard, loop):
    seen = []
    loop.add_signal_handler(signal.SIGUSR1, seen.append, "loop")
    assert loop.remove_signal_handler(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, lambda s, f: seen.append("python"))
    loop.call_soon(_kill, signal.SIGUSR1)
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert seen == ["python"]


def test_close_removes_handlers_and_wakeup_fd(sig_guard, new_loop):
    lp = new_loop()
    lp.add_signal_handler(signal.SIGUSR1, print)
    lp.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1


@pytest.mark.parametrize("sig", [0, 1000, -1])
def test_invalid_signal_number(sig_guard, loop, sig):
    with pytest.raises(ValueError):
        loop.add_signal_handler(sig, print)
    with pytest.raises(ValueError):
        loop.remove_signal_handler(sig)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_uncatchable_signal(sig_guard, loop, sig):
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(sig, print)
    assert loop.remove_signal_handler(sig) is False


def test_signal_not_an_int(sig_guard, loop):
    with pytest.raises(TypeError):
        loop.add_signal_handler("SIGUSR1", print)


def test_coroutine_function_refused(sig_guard, loop):
    async def handler():
        pass

    with pytest.raises(TypeError):
        loop.add_signal_handler(signal.SIGUSR1, handler)
    assert loop.remove_signal_handler(signal.SIGUSR1) is False


def test_add_signal_handler_outside_main_thread(sig_guard, new_loop):
    results = []

    def in_thread():
        lp = new_loop()
        try:
            lp.add_signal_handler(signal.SIGUSR1, print)
        except BaseException as exc:
            results.append(exc)
        else:
            results.append(None)

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(PROMPT)
    assert len(results) == 1 and isinstance(results[0], RuntimeError), results
    assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL  # guard untouched


def test_signal_handler_and_coroutine(sig_guard, loop):
    async def main():
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR2, got.set_result, "usr2")
        _kill(signal.SIGUSR2)
        return await asyncio.wait_for(got, PROMPT)

    assert loop.run_until_complete(main()) == "usr2"


def test_unclosed_loop_with_handlers_at_interpreter_exit(loop_kind):
    """A loop left open with a signal handler, collected at interpreter shutdown, closes
    without an 'Exception ignored' traceback (asyncio only warns, with a ResourceWarning)."""
    import subprocess
    import sys

    make = (
        "asyncio.new_event_loop()"
        if loop_kind == "asyncio"
        else f"ringloop.new_event_loop(backend={loop_kind.split('-')[1]!r})"
    )
    code = (
        "import asyncio, signal, ringloop\n"
        f"loop = {make}\n"
        "loop.add_signal_handler(signal.SIGUSR1, print)\n"
        "loop.run_until_complete(asyncio.sleep(0))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
