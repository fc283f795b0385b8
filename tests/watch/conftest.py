"""Shared fixtures for the watch tests, and a way to import ringloop.watch before _core exists.

``ringloop/__init__.py`` imports the native ``ringloop._core``. Until that is built, a bare
package object stands in for ``ringloop`` so ``ringloop.watch`` (pure Python, no _core needed)
can be imported and tested on its own.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import pytest

pytest_plugins = ["pytester"]


def _ensure_watch_importable() -> None:
    try:
        importlib.import_module("ringloop")
    except ImportError:
        for name in [m for m in sys.modules if m == "ringloop" or m.startswith("ringloop.")]:
            del sys.modules[name]
        here = os.path.dirname(os.path.abspath(__file__))
        pkg_dir = os.path.join(here, "..", "..", "python", "ringloop")
        stub = types.ModuleType("ringloop")
        stub.__path__ = [os.path.abspath(pkg_dir)]
        sys.modules["ringloop"] = stub


_ensure_watch_importable()

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in requirements-dev
    uvloop = None


def _loop_factories():
    import asyncio

    out = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    if uvloop is not None:
        out.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    try:  # the native loop, once built: the same tests, RingloopBackend selected
        from ringloop import new_event_loop as ringloop_new_event_loop
    except ImportError:
        pass
    else:
        out.append(pytest.param(ringloop_new_event_loop, id="ringloop"))
    return out


@pytest.fixture(params=_loop_factories())
def run(request):
    """Run a coroutine function to completion on each loop implementation."""
    import asyncio

    factory = request.param

    def runner(main, *args):
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(main(*args))

    runner.backend = request.node.callspec.id
    return runner
