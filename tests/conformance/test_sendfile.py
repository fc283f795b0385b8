"""CPython's test_asyncio.test_sendfile (`loop.sock_sendfile`, `loop.sendfile`) on asyncio and
both ringloop backends."""

from test.test_asyncio import test_sendfile as cpython
from test.test_asyncio import utils as test_utils

from ._loops import loop_classes

loop_classes(globals(), "SendfileTests", cpython.SendfileTestsBase, test_utils.TestCase)


tearDownModule = cpython.tearDownModule
