"""pytest plugin (entry point ``ringloop``): fail async tests that block the event loop.

- ``--ringloop-blocking=SECONDS`` (or ini ``ringloop_blocking``): every async test runs inside
  ``no_blocking(SECONDS)``; a block fails the test with the report (task, line, kind).
- ``@pytest.mark.no_blocking(threshold=0.01, strict=False)``: the same for one test;
  ``@pytest.mark.allow_blocking``: opt a test out of ``--ringloop-blocking``.
- fixture ``no_blocking``: watch this test; the fixture value is the scope, so the test can
  read ``.blocks`` or change ``.threshold``/``.strict``/``.action`` before its first await.
- fixtures ``no_task_leaks`` and ``no_thread_leaks``: fail the test when it leaves tasks
  pending or threads running.

Async tests are wrapped at ``pytest_runtest_call``, before pytest-asyncio or anyio turn the
coroutine function into a call on their loop, so the scope is entered inside the test's own
loop whichever runner (and loop implementation) drives it.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import AsyncExitStack

import pytest

from .leaks import TaskLeakError
from .leaks import no_task_leaks as _no_task_leaks
from .leaks import no_thread_leaks as _no_thread_leaks
from .scopes import BlockingError
from .scopes import no_blocking as _no_blocking
from .stacks import add_boundary_code

_SCOPE_KEY = pytest.StashKey["_no_blocking | None"]()
_TASKS_KEY = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ringloop", "ringloop event-loop checks")
    group.addoption(
        "--ringloop-blocking",
        dest="ringloop_blocking",
        type=float,
        default=None,
        metavar="THRESHOLD",
        help="fail async tests whose event loop is blocked longer than THRESHOLD seconds",
    )
    parser.addini("ringloop_blocking", "default for --ringloop-blocking (seconds)", default="")
    group.addoption(
        "--ringloop-blame-machine",
        dest="ringloop_blame_machine",
        action="store_true",
        default=None,
        help="fail also on blocks the machine made (the loop thread waiting for a CPU or for "
        "the cgroup's CPU quota); by default they are logged, not failed",
    )
    parser.addini(
        "ringloop_blame_machine", "default for --ringloop-blame-machine", type="bool", default=False
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "no_blocking(threshold=0.01, strict=False): fail this async test if it blocks the loop",
    )
    config.addinivalue_line("markers", "allow_blocking: exempt this test from --ringloop-blocking")


def _threshold_option(config: pytest.Config) -> float | None:
    value = config.getoption("ringloop_blocking", None)
    if value is None:
        ini = config.getini("ringloop_blocking")
        value = float(ini) if ini else None
    return value


def _scope_for(item: pytest.Item) -> _no_blocking | None:
    scope = item.stash.get(_SCOPE_KEY, None)
    if scope is not None:
        return scope  # the no_blocking fixture
    marker = item.get_closest_marker("no_blocking")
    if marker is not None:
        return _no_blocking(*marker.args, **marker.kwargs)
    threshold = _threshold_option(item.config)
    if threshold is not None and item.get_closest_marker("allow_blocking") is None:
        return _no_blocking(threshold, blame_machine=_blame_machine(item.config))
    return None


def _blame_machine(config: pytest.Config) -> bool:
    value = config.getoption("ringloop_blame_machine", None)
    return bool(config.getini("ringloop_blame_machine")) if value is None else value


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    __tracebackhide__ = True
    func = getattr(item, "obj", None)
    if func is None or not inspect.iscoroutinefunction(func):
        return (yield)
    scope = _scope_for(item)
    tasks = item.stash.get(_TASKS_KEY, False)
    if scope is None and not tasks:
        return (yield)

    @functools.wraps(func)
    async def watched(*args, **kwargs):
        __tracebackhide__ = True
        try:
            async with AsyncExitStack() as stack:
                if tasks:
                    await stack.enter_async_context(_no_task_leaks())
                if scope is not None:
                    await stack.enter_async_context(scope)
                return await func(*args, **kwargs)
        except (BlockingError, TaskLeakError) as err:
            # The report is the message; the plugin's and asyncio's frames would only bury it.
            raise err.with_traceback(None) from None

    add_boundary_code(watched.__code__)  # reports start at the test, not at this wrapper
    item.obj = watched
    try:
        return (yield)
    finally:
        item.obj = func


@pytest.fixture(name="no_blocking")
def _no_blocking_fixture(request: pytest.FixtureRequest) -> _no_blocking:
    """Watch this (async) test for blocking; the value is the scope, with ``.blocks``."""
    marker = request.node.get_closest_marker("no_blocking")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    threshold = kwargs.pop("threshold", None) or _threshold_option(request.config) or 0.01
    scope = _no_blocking(threshold, **kwargs)
    request.node.stash[_SCOPE_KEY] = scope
    return scope


@pytest.fixture(name="no_task_leaks")
def _no_task_leaks_fixture(request: pytest.FixtureRequest) -> None:
    """Fail this async test if tasks it created are still pending when it returns."""
    request.node.stash[_TASKS_KEY] = True


@pytest.fixture(name="no_thread_leaks")
def _no_thread_leaks_fixture():
    """Fail this test (at teardown) if threads it started are still alive."""
    with _no_thread_leaks():
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if (
        report.failed
        and call.excinfo is not None
        and call.excinfo.errisinstance((BlockingError, TaskLeakError))
    ):
        # The report already names the task and the line; the traceback through the test
        # runner and the event loop would only bury it.
        report.longrepr = f"{call.excinfo.typename}: {call.excinfo.value}"
    return report
