"""CPython's test_asyncio.test_subprocess `SubprocessMixin` on each loop.

CPython runs the suite once per child watcher; the loop is what varies here, so it runs with
the default (threaded) watcher only. The loop comes from the policy (`SubprocessWatcherMixin`
calls `policy.new_event_loop()`).
"""

from test.test_asyncio import test_subprocess as cpython

from ._loops import loop_classes

loop_classes(
    globals(),
    "SubprocessTests",
    cpython.SubprocessThreadedWatcherTests,
    factory_attr=None,
    policy=True,
)


tearDownModule = cpython.tearDownModule
