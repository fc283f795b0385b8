"""no_task_leaks / no_thread_leaks as scopes and decorators."""

from __future__ import annotations

import asyncio
import threading

import pytest
from ringloop.watch import TaskLeakError, ThreadLeakError, no_task_leaks, no_thread_leaks


def test_task_leak_names_creation_line(run):
    async def main():
        async with no_task_leaks():
            asyncio.create_task(asyncio.sleep(5), name="orphan")  # CREATED-HERE

    with pytest.raises(TaskLeakError) as info:
        run(main)
    err = info.value
    assert [t.get_name() for t in err.tasks] == ["orphan"]
    assert "CREATED-HERE" in str(err)
    for t in err.tasks:
        t.cancel()


def test_finished_and_awaited_tasks_are_not_leaks(run):
    async def main():
        async with no_task_leaks() as scope:
            await asyncio.create_task(asyncio.sleep(0))
            t = asyncio.create_task(asyncio.sleep(0.01))
            await t
        return scope.leaked

    assert run(main) == []


def test_cancel_action_and_grace(run):
    async def main():
        async with no_task_leaks(action="cancel") as scope:
            t = asyncio.create_task(asyncio.sleep(5))
        await asyncio.sleep(0)
        assert t.cancelled()
        async with no_task_leaks(grace=0.5) as scope:
            asyncio.create_task(asyncio.sleep(0.02))  # finishes within the grace period
        return scope.leaked

    assert run(main) == []


def test_task_factory_is_restored_and_chained():
    made = []

    def factory(loop, coro, **kw):
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_task_factory(factory)
        async with no_task_leaks():
            await asyncio.create_task(asyncio.sleep(0))
        assert loop.get_task_factory() is factory

    asyncio.run(main())
    assert made and made[0].__name__ == "sleep"  # created through the user's factory


def test_thread_leak_and_decorator():
    stop = threading.Event()

    @no_thread_leaks(grace=0.05)
    def starts_a_thread():
        threading.Thread(target=stop.wait, name="lingering").start()

    with pytest.raises(ThreadLeakError) as info:
        starts_a_thread()
    stop.set()
    assert [t.name for t in info.value.threads] == ["lingering"]
    assert "stop.wait" in str(info.value) or "wait" in str(info.value)


def test_thread_that_finishes_in_grace_is_fine():
    with no_thread_leaks(grace=1.0) as scope:
        threading.Thread(target=lambda: None).start()
    assert scope.leaked == []
