"""The RingloopBackend against a stand-in for ringloop.Loop that implements the native contract.

`FakeNativeLoop` is a stock selector loop whose ready queue hands out timing proxies: exactly
what the contract says the native dispatcher does (``_slice_seq``, ``_slice_start_ns``,
``_watch_set(threshold_ns, on_slow, block_ns)`` with ``on_slow(handle, start_ns, duration_ns)`` after
the slice). Its class lives in a module named ``ringloop._fake_native`` so backend selection
treats it as ringloop's. Handle._run is never patched for it.
"""

from __future__ import annotations

import asyncio
import collections
import time

import pytest
from ringloop.watch import no_blocking
from ringloop.watch.backends import asyncio_handles


class _TimedHandle:
    __slots__ = ("_h", "_loop")

    def __init__(self, h, loop):
        self._h, self._loop = h, loop

    @property
    def _cancelled(self):
        return self._h._cancelled

    def _run(self):
        loop, h = self._loop, self._h
        loop._slice_seq += 1
        start = loop._slice_start_ns = time.monotonic_ns()
        try:
            h._run()
        finally:
            loop._slice_start_ns = 0
            d = time.monotonic_ns() - start
            if loop._on_slow is not None and d >= loop._threshold_ns:
                loop._on_slow(h, start, d)


class _TimingDeque(collections.deque):
    def __init__(self, loop):
        super().__init__()
        self._loop = loop

    def popleft(self):
        return _TimedHandle(super().popleft(), self._loop)


class FakeNativeLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        super().__init__()
        self._ready = _TimingDeque(self)
        self._slice_seq = 0
        self._slice_start_ns = 0
        self._threshold_ns = 0
        self._on_slow = None
        self.watch_calls = []

    def _watch_set(self, threshold_ns, on_slow, block_ns=0):
        self.watch_calls.append(threshold_ns)
        self._threshold_ns, self._on_slow = threshold_ns, on_slow


FakeNativeLoop.__module__ = "ringloop._fake_native"


class FakeLoopWithoutHooks(asyncio.SelectorEventLoop):
    pass


FakeLoopWithoutHooks.__module__ = "ringloop._fake_native"


def _run(loop_cls, main):
    with asyncio.Runner(loop_factory=loop_cls) as r:
        return r.run(main())


def test_native_backend_selected_and_reports_the_line():
    own = {}

    async def culprit():
        await asyncio.sleep(0)
        t0 = time.monotonic()
        time.sleep(0.06)  # NATIVE-BLOCK
        own["sleep"] = time.monotonic() - t0
        await asyncio.sleep(0)

    async def main():
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        async with no_blocking(0.01, action="log") as nb:
            assert not asyncio_handles.is_patched()
            await asyncio.create_task(culprit(), name="native-culprit")
        own["scope"] = time.monotonic() - t0
        assert loop.watch_calls[0] > 0 and loop.watch_calls[-1] == 0  # on, then off
        return nb.blocks

    (block,) = _run(FakeNativeLoop, main)
    assert block.backend == "ringloop"
    assert block.task_name == "native-culprit"
    assert block.line.line == "time.sleep(0.06)  # NATIVE-BLOCK"
    # The slice holds the sleep and lies inside the scope: bounds by the events themselves,
    # however long a busy machine made either.
    assert own["sleep"] - 0.001 <= block.duration <= own["scope"]


def test_native_backend_strict_mode_flushes_short_slices():
    async def main():
        async with no_blocking(1.0, action="log", strict=True) as nb:
            await asyncio.sleep(0)
            open(__file__).close()
            await asyncio.sleep(0.01)
        return nb.blocks

    (block,) = _run(FakeNativeLoop, main)
    assert block.kind == "file" and block.strict


def test_ringloop_loop_without_hooks_falls_back_to_heartbeat():
    async def main():
        async with no_blocking(0.01, action="log") as nb:
            await asyncio.sleep(0)
            time.sleep(0.06)
            await asyncio.sleep(0)
        return nb.blocks

    (block,) = _run(FakeLoopWithoutHooks, main)
    assert block.backend == "heartbeat"
    assert block.line.line == "time.sleep(0.06)"


@pytest.mark.parametrize("backend", ["heartbeat"])
def test_forcing_a_backend(monkeypatch, backend):
    monkeypatch.setenv("RINGLOOP_WATCH_BACKEND", backend)

    async def main():
        async with no_blocking(0.01, action="log") as nb:
            await asyncio.sleep(0)
            time.sleep(0.06)
            await asyncio.sleep(0)
        return nb.blocks

    (block,) = asyncio.run(main())
    assert block.backend == backend
