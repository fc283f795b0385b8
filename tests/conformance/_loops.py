"""The loops every conformance class is generated for, and the generator itself.

CPython's `test.test_asyncio` writes each suite once as a mixin and binds it to a loop in a
small subclass (`EPollEventLoopTests(EventLoopTestsMixin, test_utils.TestCase)` with a
`create_event_loop` returning `SelectorEventLoop(EpollSelector())`). `loop_classes` does the
same for every entry of `LOOPS`: stock asyncio (the oracle) and ringloop on both backends, so a
difference between them shows up as one test id passing on `asyncio` and failing on the others.

Generated classes are named `<Suite>_<loop>` (`EventLoopTests_io_uring`) and carry
`conformance_suite`/`conformance_loop`, which `conftest.py` uses to apply `expectations.py`.
"""

from __future__ import annotations

import asyncio
import selectors

import ringloop


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    # What CPython's own EPollEventLoopTests run against.
    return asyncio.SelectorEventLoop(selectors.EpollSelector())


def _ringloop(backend: str):
    def factory() -> ringloop.Loop:
        loop = ringloop.Loop(backend=backend)
        # Never let a silent fallback run the epoll suite twice under the io_uring name.
        assert loop.backend == backend, (loop.backend, loop.backend_fallback_reason)
        return loop

    return factory


LOOPS = {
    "asyncio": _asyncio_loop,
    "io_uring": _ringloop("io_uring"),
    "epoll": _ringloop("epoll"),
}
RINGLOOP_LOOPS = ("io_uring", "epoll")


# Python 3.14 deprecated the policy API's public names (removal in 3.16) but asyncio still reads
# the policy for `asyncio.new_event_loop()`; reach it without the warning where it warns.
_events = asyncio.events
if hasattr(_events, "_BaseDefaultEventLoopPolicy"):  # 3.14+
    _BasePolicy = _events._BaseDefaultEventLoopPolicy
    _get_policy, _set_policy = _events._get_event_loop_policy, _events._set_event_loop_policy
else:
    _BasePolicy = asyncio.DefaultEventLoopPolicy
    _get_policy, _set_policy = asyncio.get_event_loop_policy, asyncio.set_event_loop_policy


class _Policy(_BasePolicy):
    """A policy whose `new_event_loop()` uses one of `LOOPS` (for tests that call
    `asyncio.new_event_loop()` or `asyncio.Runner()` themselves)."""

    def __init__(self, factory) -> None:
        super().__init__()
        self._factory = factory

    def new_event_loop(self):
        return self._factory()


def _with_task_factory(factory, task_factory):
    def make():
        loop = factory()
        loop.set_task_factory(task_factory)
        return loop

    return make


def _policy_hooks(factory) -> dict:
    saved = []

    @classmethod
    def setUpClass(cls):  # noqa: N802 (unittest's name)
        saved.append(_get_policy())
        _set_policy(_Policy(factory))
        super(cls.__conformance_generated__, cls).setUpClass()

    @classmethod
    def tearDownClass(cls):  # noqa: N802
        try:
            super(cls.__conformance_generated__, cls).tearDownClass()
        finally:
            _set_policy(saved.pop())

    return {"setUpClass": setUpClass, "tearDownClass": tearDownClass}


def loop_classes(
    namespace: dict,
    suite: str,
    *bases: type,
    factory_attr: str | None = "create_event_loop",
    policy: bool = False,
    loops=LOOPS,
    task_factory=None,
) -> None:
    """Define `<suite>_<loop>` in `namespace` for each loop.

    factory_attr: the method the mixin calls to build its loop (`create_event_loop` in
    test_events/test_sock_lowlevel/test_sendfile, `new_loop` in functional.py users), or None.
    policy: also install an event-loop policy building that loop for the class's duration, for
    tests that call `asyncio.new_event_loop()`/`asyncio.Runner` directly; and where a base
    names its loop with `loop_factory` (`IsolatedAsyncioTestCase` on 3.13+, which CPython
    3.14's suites set to `asyncio.EventLoop` so they never read the policy), that too.
    task_factory: set on every loop made (CPython's eager-task variants of a suite).
    """
    for loop_name, factory in loops.items():
        if task_factory is not None:
            factory = _with_task_factory(factory, task_factory)
        attrs = {
            "__module__": namespace["__name__"],
            "__qualname__": f"{suite}_{loop_name}",
            "conformance_suite": suite,
            "conformance_loop": loop_name,
        }
        if factory_attr is not None:
            attrs[factory_attr] = lambda self, _f=factory: _f()
        if policy:
            attrs.update(_policy_hooks(factory))
            if any(getattr(b, "loop_factory", None) is not None for b in bases):
                attrs["loop_factory"] = staticmethod(factory)
        cls = type(f"{suite}_{loop_name}", bases, attrs)
        cls.__conformance_generated__ = cls
        namespace[cls.__name__] = cls
