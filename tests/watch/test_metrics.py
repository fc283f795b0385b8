"""Prometheus exposition and the OpenTelemetry hook (with a stand-in opentelemetry module)."""

from __future__ import annotations

import asyncio
import sys
import time
import types

from ringloop.watch import metrics, no_blocking, otel


def _value(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{prefix} not in:\n{text}")


def test_prometheus_exposition_counts_slices_and_blocks():
    metrics.render()  # reset the lag gauge
    before = metrics.snapshot(reset_lag=False)

    async def main():
        async with no_blocking(0.01, action="log"):
            for _ in range(50):
                await asyncio.sleep(0)
            time.sleep(0.03)
            await asyncio.sleep(0)

    asyncio.run(main())
    text = metrics.render()
    count = _value(text, "ringloop_watch_slice_duration_seconds_count")
    assert count - before["slice_count"] >= 50
    fast = _value(text, 'ringloop_watch_slice_duration_seconds_bucket{le="0.001"}')
    slow = _value(text, 'ringloop_watch_slice_duration_seconds_bucket{le="0.025"}')
    assert fast <= slow < count  # the 30 ms slice is above the 25 ms bucket
    assert _value(text, 'ringloop_watch_blocks_total{kind="wait"}') >= 1
    assert _value(text, "ringloop_watch_loop_lag_seconds") >= 0.029
    assert "# TYPE ringloop_watch_slice_duration_seconds histogram" in text
    # The lag gauge resets at each scrape.
    assert _value(metrics.render(), "ringloop_watch_loop_lag_seconds") == 0


def test_opentelemetry_hook_with_stand_in_module(monkeypatch):
    events = []

    class Span:
        def get_span_context(self):
            return types.SimpleNamespace(is_valid=True, trace_id=1, span_id=2)

        def is_recording(self):
            return True

        def add_event(self, name, attributes):
            events.append((name, attributes))

        def set_attribute(self, k, v):
            pass

    span = Span()
    trace = types.SimpleNamespace(get_current_span=lambda: span)
    pkg = types.ModuleType("opentelemetry")
    pkg.trace = trace
    monkeypatch.setitem(sys.modules, "opentelemetry", pkg)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", trace)

    async def main():
        async with no_blocking(
            0.01, action=otel.record, context_providers=[otel.span_provider]
        ) as nb:
            time.sleep(0.03)
        return nb.blocks

    (block,) = asyncio.run(main())
    assert block.context["span_id"] == f"{2:016x}"
    ((name, attrs),) = events
    assert name == "ringloop.blocking"
    assert attrs["ringloop.block.duration_ms"] >= 29
    assert attrs["code.lineno"] == block.line.lineno


def test_opentelemetry_absent_is_a_no_op(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert otel.span_provider() == {}
    from ringloop.watch import Block

    assert otel.record(Block(0.1, 0.01, 0.0, "cpu")) is False
