"""Async generator hooks and finalization, and the executor API (run_in_executor,
set_default_executor, shutdown_default_executor, asyncio.to_thread).

asyncio facts encoded here:

* the loop installs ``sys.set_asyncgen_hooks`` only while it runs and restores the previous
  hooks afterwards;
* an async generator dropped while the loop runs is finalized on the loop (its ``finally``
  runs); ``shutdown_asyncgens()`` closes the ones still alive;
* after ``shutdown_default_executor()``, ``run_in_executor(None, ...)`` raises RuntimeError;
* ``set_default_executor`` only takes a ``ThreadPoolExecutor`` (TypeError otherwise, 3.11+).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import sys
import threading

import pytest
from loop_helpers import run_with_timeout

pytestmark = pytest.mark.timeout(30)

var = contextvars.ContextVar("var", default="unset")


def test_asyncgen_hooks_installed_only_while_running(loop):
    before = sys.get_asyncgen_hooks()

    async def main():
        return sys.get_asyncgen_hooks()

    during = loop.run_until_complete(main())
    assert during.firstiter is not None and during.finalizer is not None
    assert during != before
    assert sys.get_asyncgen_hooks() == before


def test_dropped_asyncgen_is_finalized_on_the_loop(loop):
    finalized = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            finalized.append(threading.get_ident())

    async def main():
        g = agen()
        assert await g.__anext__() == 1
        del g
        gc.collect()
        for _ in range(10):
            await asyncio.sleep(0)
            if finalized:
                break

    loop.run_until_complete(main())
    assert finalized == [threading.get_ident()]


def test_shutdown_asyncgens_finalizes_live_generator(loop):
    events = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            events.append("finally")

    g = agen()

    async def first():
        return await g.__anext__()

    assert loop.run_until_complete(first()) == 1
    assert events == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert events == ["finally"]


def test_shutdown_asyncgens_reports_errors_to_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def agen():
        try:
            yield 1
        finally:
            raise ValueError("finally failed")

    g = agen()

    async def first():
        # __anext__() must be called while the loop runs: that call runs the firstiter hook.
        return await g.__anext__()

    loop.run_until_complete(first())
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ValueError)
    assert contexts[0]["asyncgen"] is g


def test_run_in_executor_default(loop):
    main_thread = threading.get_ident()

    def work(a, b):
        return a + b, threading.get_ident()

    result, tid = run_with_timeout(loop, loop.run_in_executor(None, work, 2, 3))
    assert result == 5 and tid != main_thread


def test_run_in_executor_propagates_exception(loop):
    def fail():
        raise KeyError("in thread")

    with pytest.raises(KeyError):
        run_with_timeout(loop, loop.run_in_executor(None, fail))


def test_run_in_executor_custom_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="custom-pool") as pool:
        name = run_with_timeout(
            loop, loop.run_in_executor(pool, lambda: threading.current_thread().name)
        )
    assert name.startswith("custom-pool")


def test_set_default_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="default-pool") as pool:
        loop.set_default_executor(pool)
        name = run_with_timeout(
            loop, loop.run_in_executor(None, lambda: threading.current_thread().name)
        )
        assert name.startswith("default-pool")
        with pytest.raises(TypeError):
            loop.set_default_executor(object())


def test_shutdown_default_executor(loop):
    run_with_timeout(loop, loop.run_in_executor(None, lambda: None))
    run_with_timeout(loop, loop.shutdown_default_executor())
    with pytest.raises(RuntimeError):
        loop.run_in_executor(None, lambda: None)


def test_shutdown_default_executor_without_executor(loop):
    run_with_timeout(loop, loop.shutdown_default_executor())


def test_to_thread_copies_context(loop):
    async def main():
        var.set("from-task")
        return await asyncio.to_thread(lambda x: (x, var.get(), threading.get_ident()), 7)

    x, seen, tid = run_with_timeout(loop, main())
    assert (x, seen) == (7, "from-task") and tid != threading.get_ident()


def test_many_executor_jobs(loop):
    async def main():
        return await asyncio.gather(*(loop.run_in_executor(None, pow, i, 2) for i in range(200)))

    assert run_with_timeout(loop, main(), 20) == [i * i for i in range(200)]
