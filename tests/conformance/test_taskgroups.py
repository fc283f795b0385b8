"""CPython's test_asyncio.test_taskgroups (task groups) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration, or (CPython 3.14+) from their `loop_factory`, which
the generated classes replace. 3.14 adds the same suite on eager tasks.
"""

import asyncio

from test.test_asyncio import test_taskgroups as cpython

from ._loops import loop_classes

loop_classes(globals(), "TestTaskGroup", cpython.TestTaskGroup, factory_attr=None, policy=True)

if hasattr(cpython, "TestEagerTaskTaskGroup"):  # 3.14+
    loop_classes(
        globals(),
        "TestEagerTaskTaskGroup",
        cpython.TestEagerTaskTaskGroup,
        factory_attr=None,
        policy=True,
        task_factory=asyncio.eager_task_factory,
    )

tearDownModule = cpython.tearDownModule
