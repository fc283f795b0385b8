"""CPython's test_asyncio.test_waitfor (asyncio.wait_for) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_waitfor as cpython

from ._loops import loop_classes

loop_classes(
    globals(), "AsyncioWaitForTest", cpython.AsyncioWaitForTest, factory_attr=None, policy=True
)

tearDownModule = cpython.tearDownModule
