"""CPython 3.15's test_asyncio.test_server_context on each loop: a server's connections run in
copies of the context current when the server was made (`loop._start_serving(..., context=)`),
with and without TLS. The module is new in 3.15; before it, nothing is collected here."""

import pytest

cpython = pytest.importorskip("test.test_asyncio.test_server_context")

from ._loops import loop_classes  # noqa: E402

loop_classes(
    globals(), "ServerContextTests", cpython.AsyncioEventLoopTests, factory_attr=None, policy=True
)
loop_classes(
    globals(),
    "ServerContextSSLTests",
    cpython.AsyncioEventLoopSSLTests,
    factory_attr=None,
    policy=True,
)

tearDownModule = cpython.tearDownModule
