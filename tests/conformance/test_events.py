"""CPython's test_asyncio.test_events loop suites on asyncio, ringloop/io_uring, ringloop/epoll."""

from test.test_asyncio import test_events as cpython
from test.test_asyncio import utils as test_utils

from ._loops import loop_classes

# What CPython binds as EPollEventLoopTests: the loop suite, the Unix child-watcher setUp and
# the subprocess suite.
loop_classes(
    globals(),
    "EventLoopTests",
    cpython.UnixEventLoopTestsMixin,
    cpython.SubprocessTestsMixin,
    test_utils.TestCase,
)


tearDownModule = cpython.tearDownModule
