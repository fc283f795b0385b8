"""CPython's test_asyncio.test_sock_lowlevel (`loop.sock_*`) on asyncio and both ringloop backends."""

from test.test_asyncio import test_sock_lowlevel as cpython
from test.test_asyncio import utils as test_utils

from ._loops import loop_classes

loop_classes(globals(), "SockTests", cpython.BaseSockTestsMixin, test_utils.TestCase)


tearDownModule = cpython.tearDownModule
