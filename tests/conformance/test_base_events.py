"""CPython's test_asyncio.test_base_events, the suites that run a real loop.

`BaseEventLoopTests`/`BaseEventTests` drive a bare `BaseEventLoop` with a mocked selector and
say nothing about ringloop; `BaseLoopSockSendfileTests` tests `BaseSelectorEventLoop`'s
*fallback* on purpose. What stays: `BaseEventLoopWithSelectorTests` (built on
`asyncio.SelectorEventLoop()` in CPython, here on each loop), the three `BaseEventLoopTests`
that build their own loop with `asyncio.new_event_loop()`, and `RunningLoopTests`.
"""

from test.test_asyncio import test_base_events as cpython
from test.test_asyncio import utils as test_utils

from ._loops import loop_classes


class _OwnLoop:
    """Replaces `BaseEventLoopWithSelectorTests.setUp`, which hard-codes SelectorEventLoop."""

    def setUp(self):  # noqa: N802
        test_utils.TestCase.setUp(self)
        self.loop = self.create_event_loop()
        self.set_event_loop(self.loop)


loop_classes(
    globals(), "BaseEventLoopWithSelectorTests", _OwnLoop, cpython.BaseEventLoopWithSelectorTests
)

_NEW_LOOP_TESTS = (
    "test_create_task_error_closes_coro",
    "test_create_named_task_with_default_factory",
    "test_create_named_task_with_custom_factory",
)
NewLoopTests = type(
    "NewLoopTests",
    (test_utils.TestCase,),
    {name: cpython.BaseEventLoopTests.__dict__[name] for name in _NEW_LOOP_TESTS},
)
loop_classes(globals(), "BaseEventLoopTests", NewLoopTests, factory_attr=None, policy=True)
del NewLoopTests  # only its generated subclasses are collected

loop_classes(
    globals(), "RunningLoopTests", cpython.RunningLoopTests, factory_attr=None, policy=True
)

tearDownModule = cpython.tearDownModule
