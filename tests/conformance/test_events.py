"""CPython's test_asyncio.test_events loop suites on asyncio, ringloop/io_uring, ringloop/epoll."""

from test.test_asyncio import test_events as cpython
from test.test_asyncio import utils as test_utils

from ._loops import loop_classes

# What CPython binds as EPollEventLoopTests: the loop suite and the subprocess suite. On
# 3.11-3.13 the loop suite is UnixEventLoopTestsMixin (EventLoopTestsMixin plus a child-watcher
# setUp); 3.14 removed child watchers, and that mixin with them.
loop_classes(
    globals(),
    "EventLoopTests",
    getattr(cpython, "UnixEventLoopTestsMixin", cpython.EventLoopTestsMixin),
    cpython.SubprocessTestsMixin,
    test_utils.TestCase,
)


tearDownModule = cpython.tearDownModule
