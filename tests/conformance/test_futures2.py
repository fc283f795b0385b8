"""CPython's test_asyncio.test_futures2 (futures) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_futures2 as cpython

from ._loops import loop_classes

loop_classes(globals(), "CFutureTests", cpython.CFutureTests, factory_attr=None, policy=True)
loop_classes(globals(), "PyFutureTests", cpython.PyFutureTests, factory_attr=None, policy=True)
loop_classes(globals(), "FutureReprTests", cpython.FutureReprTests, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
