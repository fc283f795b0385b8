"""Shared fixtures for the watch tests: each runs on stock asyncio, uvloop and ringloop."""

from __future__ import annotations

import pytest
import ringloop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in requirements-dev
    uvloop = None


def _loop_factories():
    import asyncio

    out = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    if uvloop is not None:
        out.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    # The native loop: the same tests, RingloopBackend selected.
    out.append(pytest.param(ringloop.new_event_loop, id="ringloop"))
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
