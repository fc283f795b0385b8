"""CPython's test_asyncio.test_buffered_proto on each loop."""

import unittest

from test.test_asyncio import test_buffered_proto as cpython

from ._loops import loop_classes

loop_classes(
    globals(),
    "BufferedProtocolTests",
    cpython.BaseTestBufferedProtocol,
    unittest.TestCase,
    factory_attr="new_loop",
)

tearDownModule = cpython.tearDownModule
