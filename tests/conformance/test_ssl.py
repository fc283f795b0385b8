"""CPython's test_asyncio.test_ssl `TestSSL` suite on each loop (its setUp calls
`asyncio.new_event_loop()`, so the loop comes from the policy)."""

from test.test_asyncio import test_ssl as cpython

from ._loops import loop_classes

loop_classes(globals(), "TestSSL", cpython.TestSSL, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
