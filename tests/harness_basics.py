"""What every test harness here needs (imported as ``harness_basics``; not a test module):
whether a missing tool fails or skips, a free loopback port, and polling for a condition.

tests/ is on ``sys.path`` because of tests/conftest.py, so each suite's helpers
(tests/http/serve_helpers.py, tests/server/srv_harness.py, tests/realclients/...) import
these instead of keeping copies.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

HOST = "127.0.0.1"

# A missing tool or server fails instead of skipping when CI runs the suite or the developer
# asks for it.
REQUIRE = os.environ.get("CI") == "true" or os.environ.get("RINGLOOP_REQUIRE") == "1"


def unavailable(reason: str) -> None:
    """Skip (or, under CI / RINGLOOP_REQUIRE=1, fail) for want of a tool or server."""
    if REQUIRE:
        pytest.fail(f"{reason} (required under CI / RINGLOOP_REQUIRE=1)")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the kernel just handed out (for servers that must bind
    the port themselves; the window in which another process could take it is tiny)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition()` until it returns something true; fail naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            result = condition()
            if result:
                return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
