"""CPython's test_asyncio.test_locks (locks) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_locks as cpython

from ._loops import loop_classes

loop_classes(globals(), "LockTests", cpython.LockTests, factory_attr=None, policy=True)
loop_classes(globals(), "EventTests", cpython.EventTests, factory_attr=None, policy=True)
loop_classes(globals(), "ConditionTests", cpython.ConditionTests, factory_attr=None, policy=True)
loop_classes(globals(), "SemaphoreTests", cpython.SemaphoreTests, factory_attr=None, policy=True)
loop_classes(globals(), "BarrierTests", cpython.BarrierTests, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
