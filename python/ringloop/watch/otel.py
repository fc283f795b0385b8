"""OpenTelemetry: put each block on the span of the request that blocked. Optional.

Use ``context_providers=[otel.span_provider]`` so the span current in the blocked task's
context rides along in ``block.context``, and ``on_block=otel.record`` (or
``otel.install()``, which hears every block) to add a ``ringloop.blocking`` span event with the
duration, kind, task, line and the breakdown by cause (``ringloop.block.cause.<cause>_ms``,
``ringloop.block.causes``, and for a GIL held elsewhere ``ringloop.block.gil.thread``/``.at``).
Without the ``opentelemetry`` package both do nothing.
"""

from __future__ import annotations

from typing import Any

from . import monitor as _mon
from .block import Block

SPAN_KEY = "otel_span"


def _trace() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def span_provider() -> dict[str, Any]:
    """Context provider: the current span (called in the blocked task's context)."""
    trace = _trace()
    if trace is None:
        return {}
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return {}
    return {SPAN_KEY: span, "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}


def attributes(block: Block) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "ringloop.block.duration_ms": round(block.duration * 1000, 3),
        "ringloop.block.threshold_ms": round(block.threshold * 1000, 3),
        "ringloop.block.kind": block.kind,
    }
    if block.task_name:
        attrs["ringloop.block.task"] = block.task_name
    if block.coroutine:
        attrs["ringloop.block.coroutine"] = block.coroutine
    if block.callback:
        attrs["ringloop.block.callback"] = block.callback
    if block.causes:
        attrs["ringloop.block.causes"] = [c.cause for c in block.causes]
        attrs["ringloop.block.breakdown"] = block.breakdown()
        for c in block.causes:
            attrs[f"ringloop.block.cause.{c.cause}_ms"] = round(c.seconds * 1000, 3)
            if c.cause == "gil":
                for key in ("thread", "at"):
                    if c.evidence.get(key):
                        attrs[f"ringloop.block.gil.{key}"] = str(c.evidence[key])
    if block.line is not None:
        attrs["code.filepath"] = block.line.filename
        attrs["code.lineno"] = block.line.lineno
        attrs["code.function"] = block.line.name
    return attrs


def record(block: Block) -> bool:
    """Add a ``ringloop.blocking`` event to the block's span. Returns whether it did."""
    span = block.context.get(SPAN_KEY)
    if span is None:
        trace = _trace()
        if trace is None:
            return False
        span = trace.get_current_span()
    if not span.is_recording():
        return False
    span.add_event("ringloop.blocking", attributes=attributes(block))
    span.set_attribute("ringloop.blocked", True)
    return True


def install() -> None:
    """Record every block reported by any consumer (idempotent)."""
    if record not in _mon._block_listeners:
        _mon._block_listeners.append(record)
