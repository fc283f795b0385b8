"""The exception handler API, errors escaping callbacks, the task factory, and the future and
task types the loop hands out.

asyncio facts encoded here:

* an exception in a callback goes to the exception handler with a context holding
  ``message`` ("Exception in callback ..."), ``exception`` and ``handle`` (the very handle
  call_soon returned); the loop keeps running;
* without a custom handler, ``default_exception_handler`` logs at ERROR on the ``asyncio`` logger;
* an exception raised *by* a custom handler is logged as "Unhandled error in exception handler";
* ``create_future``/``create_task`` return CPython's C ``_asyncio.Future``/``_asyncio.Task``
  (exactly ``asyncio.Future``/``asyncio.Task``), which ringloop keeps per the design.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging

import pytest
from loop_helpers import run_forever_with_watchdog

pytestmark = pytest.mark.timeout(30)

var = contextvars.ContextVar("var", default="unset")


class Boom(Exception):
    pass


def _raise_boom():
    raise Boom("in callback")


def test_exception_in_callback_reaches_custom_handler_and_loop_keeps_running(loop):
    contexts = []
    after = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append((lp, ctx)))
    h = loop.call_soon(_raise_boom)
    loop.call_soon(after.append, "same-iteration")
    loop.call_later(0.01, after.append, "later")
    loop.call_later(0.03, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert after == ["same-iteration", "later"]
    assert len(contexts) == 1
    lp, ctx = contexts[0]
    assert lp is loop
    assert isinstance(ctx["message"], str) and ctx["message"].startswith("Exception in callback")
    assert isinstance(ctx["exception"], Boom)
    assert ctx["handle"] is h


def test_exception_in_timer_callback_reaches_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    h = loop.call_later(0.001, _raise_boom)
    loop.call_later(0.03, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], Boom)
    assert contexts[0]["handle"] is h


def test_default_handler_logs_on_asyncio_logger(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop.call_soon(_raise_boom)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.ERROR
    assert rec.getMessage().startswith("Exception in callback")
    assert rec.exc_info and rec.exc_info[0] is Boom


def test_exception_handler_get_set(loop):
    assert loop.get_exception_handler() is None

    def handler(lp, ctx):
        pass

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None
    with pytest.raises(TypeError):
        loop.set_exception_handler(1)
    assert loop.get_exception_handler() is None


def test_call_exception_handler_uses_custom_then_default(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    got = []
    loop.set_exception_handler(lambda lp, ctx: got.append((lp, ctx)))
    ctx = {"message": "custom message", "exception": Boom("x")}
    loop.call_exception_handler(ctx)
    assert got == [(loop, ctx)]
    assert not [r for r in caplog.records if r.name == "asyncio"]

    loop.set_exception_handler(None)
    loop.call_exception_handler({"message": "to the default handler"})
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("to the default handler" in m for m in msgs)


def test_default_exception_handler_logs(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop.default_exception_handler({"message": "direct call", "exception": Boom("y")})
    recs = [r for r in caplog.records if r.name == "asyncio"]
    assert len(recs) == 1 and "direct call" in recs[0].getMessage()
    assert recs[0].exc_info[0] is Boom


def test_failing_exception_handler_is_logged_and_loop_survives(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")

    def bad_handler(lp, ctx):
        raise RuntimeError("handler broke")

    loop.set_exception_handler(bad_handler)
    after = []
    loop.call_soon(_raise_boom)
    loop.call_soon(after.append, "ran")
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert after == ["ran"]
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("Unhandled error in exception handler" in m for m in msgs), msgs


def test_create_future_and_task_are_c_types(loop):
    fut = loop.create_future()
    assert type(fut) is asyncio.Future
    assert fut.get_loop() is loop

    async def coro():
        return 1

    task = loop.create_task(coro())
    assert type(task) is asyncio.Task
    assert task.get_loop() is loop
    assert loop.run_until_complete(task) == 1
    fut.cancel()


def test_task_names(loop):
    async def coro():
        return asyncio.current_task().get_name()

    named = loop.create_task(coro(), name="my-task")
    assert named.get_name() == "my-task"
    unnamed = loop.create_task(coro())
    assert unnamed.get_name().startswith("Task-")
    assert loop.run_until_complete(named) == "my-task"
    loop.run_until_complete(unnamed)
    named.set_name("renamed")
    assert named.get_name() == "renamed"


def test_create_task_requires_coroutine(loop):
    with pytest.raises(TypeError):
        loop.create_task(1)


def test_create_task_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "task-ctx")

    async def coro():
        return var.get()

    assert loop.run_until_complete(loop.create_task(coro(), context=ctx)) == "task-ctx"
    assert loop.run_until_complete(loop.create_task(coro())) == "unset"


def test_task_factory(loop):
    assert loop.get_task_factory() is None
    made = []

    def factory(lp, coro, **kwargs):
        task = asyncio.Task(coro, loop=lp, **kwargs)
        made.append(task)
        return task

    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def coro():
        return "via factory"

    task = loop.create_task(coro())
    assert made == [task]
    assert loop.run_until_complete(task) == "via factory"
    # Tasks created implicitly (ensure_future / gather of coroutines) use the factory too.
    loop.run_until_complete(asyncio.gather(coro(), coro()))
    assert len(made) == 3

    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    loop.run_until_complete(loop.create_task(coro()))
    assert len(made) == 3
    with pytest.raises(TypeError):
        loop.set_task_factory(1)


def test_unretrieved_task_exception_reaches_handler(loop):
    import gc

    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def fail():
        raise Boom("never retrieved")

    task = loop.create_task(fail())
    loop.run_until_complete(asyncio.sleep(0.01))
    assert task.done()
    del task
    gc.collect()
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], Boom)
    assert "never retrieved" in contexts[0]["message"]
