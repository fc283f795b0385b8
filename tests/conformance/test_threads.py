"""CPython's test_asyncio.test_threads (asyncio.to_thread) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_threads as cpython

from ._loops import loop_classes

loop_classes(globals(), "ToThreadTests", cpython.ToThreadTests, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
