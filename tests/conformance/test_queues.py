"""CPython's test_asyncio.test_queues (queues) on each loop.

These are `IsolatedAsyncioTestCase` suites: their loop comes from the event-loop policy, which
the generated classes set for their duration.
"""

from test.test_asyncio import test_queues as cpython

from ._loops import loop_classes

loop_classes(globals(), "QueueBasicTests", cpython.QueueBasicTests, factory_attr=None, policy=True)
loop_classes(globals(), "QueueGetTests", cpython.QueueGetTests, factory_attr=None, policy=True)
loop_classes(globals(), "QueuePutTests", cpython.QueuePutTests, factory_attr=None, policy=True)
loop_classes(globals(), "LifoQueueTests", cpython.LifoQueueTests, factory_attr=None, policy=True)
loop_classes(
    globals(), "PriorityQueueTests", cpython.PriorityQueueTests, factory_attr=None, policy=True
)
loop_classes(globals(), "QueueJoinTests", cpython.QueueJoinTests, factory_attr=None, policy=True)
loop_classes(
    globals(), "LifoQueueJoinTests", cpython.LifoQueueJoinTests, factory_attr=None, policy=True
)
loop_classes(
    globals(),
    "PriorityQueueJoinTests",
    cpython.PriorityQueueJoinTests,
    factory_attr=None,
    policy=True,
)

tearDownModule = cpython.tearDownModule
