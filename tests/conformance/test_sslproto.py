"""CPython's test_asyncio.test_sslproto `BaseStartTLS` suite (`loop.start_tls`) on each loop."""

import unittest

from test.test_asyncio import test_sslproto as cpython

from ._loops import loop_classes

loop_classes(
    globals(), "StartTLSTests", cpython.BaseStartTLS, unittest.TestCase, factory_attr="new_loop"
)

tearDownModule = cpython.tearDownModule
