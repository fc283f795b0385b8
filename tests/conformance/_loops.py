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


class _Policy(asyncio.DefaultEventLoopPolicy):
    """A policy whose `new_event_loop()` uses one of `LOOPS` (for tests that call
    `asyncio.new_event_loop()` or `asyncio.Runner()` themselves)."""

    def __init__(self, factory) -> None:
        super().__init__()
        self._factory = factory

    def new_event_loop(self):
        return self._factory()


def _policy_hooks(factory) -> dict:
    saved = []

    @classmethod
    def setUpClass(cls):  # noqa: N802 (unittest's name)
        saved.append(asyncio.get_event_loop_policy())
        asyncio.set_event_loop_policy(_Policy(factory))
        super(cls.__conformance_generated__, cls).setUpClass()

    @classmethod
    def tearDownClass(cls):  # noqa: N802
        try:
            super(cls.__conformance_generated__, cls).tearDownClass()
        finally:
            asyncio.set_event_loop_policy(saved.pop())

    return {"setUpClass": setUpClass, "tearDownClass": tearDownClass}


def loop_classes(
    namespace: dict,
    suite: str,
    *bases: type,
    factory_attr: str | None = "create_event_loop",
    policy: bool = False,
    loops=LOOPS,
) -> None:
    """Define `<suite>_<loop>` in `namespace` for each loop.

    factory_attr: the method the mixin calls to build its loop (`create_event_loop` in
    test_events/test_sock_lowlevel/test_sendfile, `new_loop` in functional.py users), or None.
    policy: also install an event-loop policy building that loop for the class's duration, for
    tests that call `asyncio.new_event_loop()`/`asyncio.Runner` directly.
    """
    for loop_name, factory in loops.items():
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
        cls = type(f"{suite}_{loop_name}", bases, attrs)
        cls.__conformance_generated__ = cls
        namespace[cls.__name__] = cls
