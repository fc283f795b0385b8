"""CPython's test_asyncio.test_timeouts (asyncio.timeout) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_timeouts as cpython

from ._loops import loop_classes

loop_classes(globals(), "TimeoutTests", cpython.TimeoutTests, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
