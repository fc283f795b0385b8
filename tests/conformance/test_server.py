"""CPython's test_asyncio.test_server (`Server.start_serving`/`serve_forever`) on each loop.

`SelectorStartServerTests` is `BaseStartServer` plus the Unix-socket tests.
"""

from test.test_asyncio import test_server as cpython

from ._loops import loop_classes

loop_classes(
    globals(), "StartServerTests", cpython.SelectorStartServerTests, factory_attr="new_loop"
)


tearDownModule = cpython.tearDownModule
