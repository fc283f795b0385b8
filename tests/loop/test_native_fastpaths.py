"""Behaviour of the loop methods ringloop implements natively for speed — create_task,
create_future, get_debug and the pre-bound call_soon — checked against stock asyncio."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

pytestmark = pytest.mark.timeout(30)

var = contextvars.ContextVar("var", default="unset")


async def _read_var():
    return var.get()


def test_create_task_name_and_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")
    task = loop.create_task(_read_var(), name="reader", context=ctx)
    assert task.get_name() == "reader"
    assert type(task) is asyncio.Task
    assert loop.run_until_complete(task) == "in-ctx"


def test_create_task_uses_the_task_factory(loop):
    seen = []

    def factory(lp, coro, **kw):
        seen.append((lp, kw))
        return asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(factory)
    task = loop.create_task(_read_var(), name="f")
    assert loop.run_until_complete(task) == "unset"
    assert seen and seen[0][0] is loop
    assert task.get_name() == "f"


def test_create_task_in_debug_mode_records_source(loop):
    loop.set_debug(True)
    task = loop.create_task(_read_var())
    assert task._source_traceback, "debug mode keeps where the task was created"
    loop.run_until_complete(task)


def test_create_task_and_future_on_closed_loop(loop):
    loop.close()
    coro = _read_var()
    with pytest.raises(RuntimeError, match="closed"):
        loop.create_task(coro)
    coro.close()
    fut = loop.create_future()  # asyncio allows this on a closed loop
    assert fut.get_loop() is loop and type(fut) is asyncio.Future


def test_get_debug_follows_set_debug(loop):
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_call_soon_can_be_patched_per_instance(loop):
    calls = []
    orig = loop.call_soon

    def spy(cb, *args, **kw):
        calls.append(cb)
        return orig(cb, *args, **kw)

    loop.call_soon = spy
    fut = loop.create_future()
    loop.call_soon(fut.set_result, 1)
    assert loop.run_until_complete(fut) == 1
    assert calls, "the instance attribute wins, as on asyncio"


@pytest.mark.parametrize(
    "host, port",
    [("127.0.0.1", 80), ("::1", "443"), (None, 0), (b"10.1.2.3", b"8080"), ("localhost", 80)],
)
def test_getaddrinfo_matches_the_socket_module(loop, host, port):
    import socket

    got = loop.run_until_complete(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    assert sorted(got) == sorted(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def test_numeric_getaddrinfo_needs_no_executor(loop, loop_kind):
    if loop_kind == "asyncio":
        pytest.skip("ringloop's fast path: asyncio always resolves in the executor")
    import concurrent.futures

    class Refusing(concurrent.futures.ThreadPoolExecutor):
        def submit(self, *a, **kw):
            raise AssertionError("numeric getaddrinfo must not use the executor")

    ex = Refusing(max_workers=1)
    loop.set_default_executor(ex)
    try:
        res = loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 8080))
        assert res and all(ai[4][0] == "127.0.0.1" for ai in res)
        with pytest.raises(AssertionError, match="must not use"):
            loop.run_until_complete(loop.getaddrinfo("localhost", 80))  # a name: executor
    finally:
        ex.shutdown()
