"""CPython's test_asyncio.test_streams (`StreamReader`/`StreamWriter`, `start_server`,
`open_connection`, Unix-socket streams) on each loop.

`StreamTests.setUp` calls `asyncio.new_event_loop()` itself, so the class runs under a policy
that builds the loop under test.
"""

from test.test_asyncio import test_streams as cpython

from ._loops import loop_classes

loop_classes(globals(), "StreamTests", cpython.StreamTests, factory_attr=None, policy=True)

tearDownModule = cpython.tearDownModule
