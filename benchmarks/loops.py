"""The event loops under test: their registry (``LOOPS``) and the one way to build each.

Every suite that compares loops means the same thing by "uvloop" or "ringloop-epoll", so the
names, what each needs in its environment and how it is constructed live here once.
``make_loop`` also describes what actually runs (class, version, backend) so a suite records
it next to its numbers, and ``package_mtime`` says which build of a loop's package ran.

This module is the subject of the comparisons, not the machinery: starting processes,
pinning and /proc accounting are in ``harness.py``; tables, charts and README sections in
``reporting.py``. It imports neither, so any suite or helper may import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import selectors
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LoopSpec:
    """One event loop we measure.

    ``kind`` is "baseline" (stock asyncio: every ratio is against it), "peer" (another
    project, the figures ringloop is compared with) or "ours" (ringloop itself).
    ``env`` is set in the worker's environment before anything is imported, because
    ringloop reads ``RINGLOOP_BACKEND`` when it probes the kernel.
    ``dist`` is the distribution whose version is recorded.
    """

    name: str
    kind: str
    dist: str | None
    env: dict[str, str] = field(default_factory=dict)
    expect_backend: str | None = None


LOOPS: dict[str, LoopSpec] = {
    spec.name: spec
    for spec in (
        LoopSpec("asyncio", "baseline", None),
        LoopSpec("uvloop", "peer", "uvloop"),
        LoopSpec("rloop", "peer", "rloop"),
        LoopSpec("uringcore", "peer", "uringcore"),
        LoopSpec(
            "ringloop-io_uring",
            "ours",
            "ringloop",
            {"RINGLOOP_BACKEND": "io_uring"},
            expect_backend="io_uring",
        ),
        LoopSpec(
            "ringloop-epoll",
            "ours",
            "ringloop",
            {"RINGLOOP_BACKEND": "epoll"},
            expect_backend="epoll",
        ),
    )
}
PEERS = [name for name, spec in LOOPS.items() if spec.kind == "peer"]


class BackendMismatch(RuntimeError):
    """The loop ran on another backend than the one forced through the environment.

    ``info`` is the description ``make_loop`` would have returned, so the backend that did
    run is still recorded.
    """

    def __init__(self, message: str, info: dict[str, Any]):
        super().__init__(message)
        self.info = info


def make_loop(name: str) -> tuple[asyncio.AbstractEventLoop, dict[str, Any]]:
    """Build a fresh loop named in ``LOOPS`` and describe what actually runs.

    The description says which class was built and, where the loop can tell us, which
    backend it uses. We only record what the loop itself reports (``loop.backend``,
    asyncio's selector class): a guess written next to a measurement would be read as fact.
    Raises whatever the import or the constructor raises; the worker records it.
    """
    spec = LOOPS[name]
    for key, value in spec.env.items():
        # The runner already passes these in the child's environment; setting them here
        # too keeps `primitives.py --worker ringloop-epoll` honest when run by hand.
        os.environ[key] = value
    if name == "asyncio":
        # Not asyncio.new_event_loop(): an imported peer could have installed a policy.
        loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
    elif name == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    elif name == "rloop":
        # rloop's public factory; RLoop is its AbstractEventLoop subclass over a Rust core.
        import rloop

        loop = rloop.new_event_loop()
    elif name == "uringcore":
        import uringcore

        loop = uringcore.UringEventLoop()
    elif name.startswith("ringloop-"):
        import ringloop

        # Thread-bound, as ringloop.run() makes it: every suite makes, runs and closes its loop
        # on one thread.
        loop = ringloop.new_event_loop(thread_bound=True)
    else:  # pragma: no cover - LOOPS and this function are edited together
        raise KeyError(name)

    cls = type(loop)
    info: dict[str, Any] = {
        "loop_class": f"{cls.__module__}.{cls.__qualname__}",
        "version": _dist_version(spec.dist) if spec.dist else platform.python_version(),
        "backend": None,
    }
    backend = getattr(loop, "backend", None)
    if backend is not None:
        info["backend"] = str(backend)
    elif isinstance(getattr(loop, "_selector", None), selectors.BaseSelector):
        info["backend"] = type(loop._selector).__name__
    if spec.expect_backend is not None and info["backend"] != spec.expect_backend:
        loop.close()
        raise BackendMismatch(
            f"asked for RINGLOOP_BACKEND={spec.expect_backend}, "
            f"loop.backend reports {info['backend']!r}",
            info,
        )
    return loop, info


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def package_mtime(loop: asyncio.AbstractEventLoop) -> str | None:
    """When the loop's package was last modified: its newest file, native module included.

    ringloop is rebuilt into the tree while others work on it; comparing this across the
    runs of one loop tells whether every round measured the same build.
    """
    package = sys.modules.get(type(loop).__module__.split(".")[0])
    init = getattr(package, "__file__", None)
    if init is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        # Sources and native modules only: __pycache__ is rewritten by mere imports.
        files = Path(init).parent.rglob("*")
        newest = max(p.stat().st_mtime for p in files if p.suffix in (".py", ".so"))
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(newest))
    return None
