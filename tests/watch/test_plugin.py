"""The pytest plugin, driven through pytester: failures name the line; opt-outs work."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

_LOADED_BY_ENTRY_POINT = any(ep.name == "ringloop" for ep in entry_points(group="pytest11"))
PLUGIN_ARGS = () if _LOADED_BY_ENTRY_POINT else ("-p", "ringloop.watch.pytest_plugin")

TESTS = """
import asyncio, time, threading
import pytest

@pytest.mark.asyncio
async def test_blocks():
    await asyncio.sleep(0)
    time.sleep(0.06)  # THE-LINE
    await asyncio.sleep(0)

@pytest.mark.asyncio
async def test_clean():
    await asyncio.sleep(0.06)

@pytest.mark.asyncio
@pytest.mark.allow_blocking
async def test_allowed():
    time.sleep(0.06)

def test_sync_is_ignored():
    time.sleep(0.06)
"""


def _run(pytester, *args):
    return pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", *args)


def test_option_fails_blocking_test_with_the_line(pytester):
    pytester.makepyfile(test_app=TESTS)
    result = _run(pytester, "--ringloop-blocking=0.01")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*BlockingError*", "*time.sleep(0.06)  # THE-LINE*"])
    result.stdout.fnmatch_lines(["*FAILED test_app.py::test_blocks*"])


def test_without_option_nothing_fails(pytester):
    pytester.makepyfile(test_app=TESTS)
    _run(pytester).assert_outcomes(passed=4)


def test_marker_and_fixture(pytester):
    pytester.makepyfile(
        test_marks="""
import asyncio, time
import pytest

@pytest.mark.asyncio
@pytest.mark.no_blocking(threshold=0.01)
async def test_marked():
    time.sleep(0.06)

@pytest.mark.asyncio
@pytest.mark.no_blocking(threshold=1.0, strict=True)
async def test_marked_strict():
    open(__file__).close()

@pytest.mark.asyncio
async def test_fixture(no_blocking):
    no_blocking.action = "log"
    time.sleep(0.06)
    await asyncio.sleep(0)
    assert len(no_blocking.blocks) == 1

@pytest.mark.asyncio
async def test_fixture_raises(no_blocking):
    time.sleep(0.06)
"""
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*strict mode*"])


def test_anyio_tests_are_watched(pytester):
    pytester.makepyfile(
        test_any="""
import time
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
async def test_blocks_under_anyio():
    time.sleep(0.06)  # ANYIO-LINE
"""
    )
    result = _run(pytester, "--ringloop-blocking=0.01")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ANYIO-LINE*"])


def test_leak_fixtures(pytester):
    pytester.makepyfile(
        test_leaky_app="""
import asyncio, threading
import pytest

@pytest.mark.asyncio
async def test_task_leak(no_task_leaks):
    asyncio.create_task(asyncio.sleep(10), name="forgotten")  # LEAK-LINE

@pytest.mark.asyncio
async def test_no_task_leak(no_task_leaks):
    await asyncio.create_task(asyncio.sleep(0))

def test_thread_leak(no_thread_leaks):
    ev = threading.Event()
    threading.Thread(target=ev.wait, args=(0.5,), name="stuck").start()
"""
    )
    result = _run(pytester)
    # The thread leak errors at teardown, after its call phase passed.
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*TaskLeakError*", "*forgotten*", "*LEAK-LINE*"])
    assert "base_events.py" not in result.stdout.str().split("TaskLeakError", 1)[1]
    result.stdout.fnmatch_lines(["*ThreadLeakError*stuck*"])


@pytest.mark.parametrize("threshold", ["0.01"])
def test_ini_option(pytester, threshold):
    pytester.makeini(f"[pytest]\nringloop_blocking = {threshold}\n")
    pytester.makepyfile(test_app=TESTS)
    _run(pytester).assert_outcomes(passed=3, failed=1)
