"""ASGI apps for `test_app_tasks.py`: what an application sees of the task it runs in.

Each endpoint answers JSON with what it observed, so the test compares ringloop with uvicorn
(a task per request there) on the same facts.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os

import anyio

REQUEST_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")
_released = asyncio.Event()


async def _answer(send, facts: dict, status: int = 200) -> None:
    body = json.dumps(facts).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    task = asyncio.current_task()
    facts: dict = {"is_task": isinstance(task, asyncio.Task)}
    if path.startswith("/task-name"):
        facts["name"] = task.get_name()
        await asyncio.sleep(0)  # still the name once the task itself steps the coroutine
        facts["name_after_await"] = asyncio.current_task().get_name()
    elif path == "/contextvar":
        facts["before"] = REQUEST_VAR.get()
        REQUEST_VAR.set(scope["query_string"].decode())
        await asyncio.sleep(0)
        facts["after_await"] = REQUEST_VAR.get()
    elif path == "/same-task":
        await asyncio.sleep(0.001)
        facts["same_after_await"] = asyncio.current_task() is task
    elif path == "/timeout":
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
            facts["timed_out"] = False
        except TimeoutError:
            facts["timed_out"] = True
        facts["cancelling"] = asyncio.current_task().cancelling()
    elif path == "/cancel-caught":
        task.cancel()
        try:
            await asyncio.sleep(5)
            facts["cancelled"] = False
        except asyncio.CancelledError:
            facts["cancelled"] = True
            task.uncancel()
        facts["cancelling"] = task.cancelling()
    elif path == "/cancel-uncaught":
        task.cancel()
        await asyncio.sleep(5)
    elif path == "/anyio":
        with anyio.move_on_after(0.01) as scope_:
            await anyio.sleep(5)
        facts["moved_on"] = scope_.cancelled_caught
        results = []
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(_append_later, results, i)
        facts["group"] = sorted(results)
    elif path == "/background":
        # Answer, then go on working until /release runs: on the same connection too, so the
        # next request must not wait for this coroutine to return.
        _released.clear()
        await _answer(send, facts)
        await _released.wait()
        if scope["query_string"]:
            with open(scope["query_string"].decode(), "w") as done:
                done.write("finished")
        return
    elif path == "/background-slow":
        await _answer(send, facts)
        await asyncio.sleep(0.5)
        with open(scope["query_string"].decode(), "w") as done:
            done.write(str(os.getpid()))
        return
    elif path == "/release":
        _released.set()
    await _answer(send, facts)


async def _append_later(results: list, i: int) -> None:
    await asyncio.sleep(0.001 * i)
    results.append(i)


class _Awaitable:
    def __init__(self, scope, receive, send):
        self.coro = app(scope, receive, send)

    def __await__(self):
        return self.coro.__await__()


def awaitable_app(scope, receive, send):
    """An ASGI callable that returns an awaitable that is not a coroutine."""
    return _Awaitable(scope, receive, send)
