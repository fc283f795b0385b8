"""Prometheus metrics: slice durations, blocks by kind, loop lag. No dependency needed.

``metrics.render()`` returns the text exposition format (serve it on ``/metrics`` yourself);
``metrics.register_prometheus_client()`` exposes the same series through prometheus_client's
default registry when that package is installed.

- ``ringloop_watch_slice_duration_seconds`` (histogram): every slice of every watched loop.
  The hot path only counts slices and sums their durations; bucket counts are kept for slices
  longer than 1 ms (rare), the ``le="0.001"`` bucket is derived from the total. On the
  heartbeat backend a "slice" is one heartbeat interval and its duration the beat's lateness;
  on the native backend the dispatcher counts every slice it times, with the same buckets.
- ``ringloop_watch_blocks_total{kind}`` (counter): blocks reported, by kind (the largest cause).
- ``ringloop_watch_block_causes_total{cause}`` (counter): blocks in which each cause had a
  share (``gc``, ``throttled``, ``starved``, ``gil``, or the application's ``cpu``/``wait``/
  I/O kind), and ``ringloop_watch_block_seconds_total{cause}`` (counter): the seconds of
  blocked loop each cause accounts for (see causes.py).
- ``ringloop_watch_loop_lag_seconds`` (gauge): the longest slice since the previous scrape,
  i.e. the longest any ready callback had to wait for the loop.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from . import monitor as _mon
from .block import Block
from .slices import BUCKETS, SliceState

_PREFIX = "ringloop_watch"


class PrometheusMetrics:
    def __init__(self) -> None:
        self.blocks_by_kind: Counter[str] = Counter()
        self.blocks_by_cause: Counter[str] = Counter()
        self.seconds_by_cause: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._retired_count = 0
        self._retired_total_ns = 0
        self._retired_hist = [0] * len(BUCKETS)
        self._retired_max_ns = 0

    def on_block(self, block: Block) -> None:
        with self._lock:
            self.blocks_by_kind[block.kind] += 1
            for c in block.causes:
                self.blocks_by_cause[c.cause] += 1
                self.seconds_by_cause[c.cause] += c.seconds

    def _states(self) -> list[SliceState]:
        retired, _mon._retired[:] = list(_mon._retired), []
        for st in retired:  # loops no longer watched: keep their totals
            self._retired_count += st.count
            self._retired_total_ns += st.total_ns
            self._retired_max_ns = max(self._retired_max_ns, st.max_ns)
            for i, n in enumerate(st.hist):
                self._retired_hist[i] += n
        return [m.state for m in list(_mon._monitors.values())]

    def snapshot(self, reset_lag: bool = True) -> dict[str, Any]:
        """The current values as plain numbers (what `render` formats)."""
        with self._lock:
            states = self._states()
            count = self._retired_count + sum(s.count for s in states)
            total = self._retired_total_ns + sum(s.total_ns for s in states)
            hist = list(self._retired_hist)
            for s in states:
                for i, n in enumerate(s.hist):
                    hist[i] += n
            lag = max([self._retired_max_ns, *(s.max_ns for s in states)])
            if reset_lag:
                self._retired_max_ns = 0
                for s in states:
                    s.max_ns = 0
            # hist[i] counts slices longer than BUCKETS[i]; Prometheus wants "<= bound".
            buckets = [(b, count - n) for b, n in zip(BUCKETS, hist, strict=True)]
            return {
                "slice_count": count,
                "slice_sum": total / 1e9,
                "buckets": buckets,
                "blocks_by_kind": dict(self.blocks_by_kind),
                "blocks_by_cause": dict(self.blocks_by_cause),
                "seconds_by_cause": dict(self.seconds_by_cause),
                "loop_lag": lag / 1e9,
            }

    def render(self) -> str:
        snap = self.snapshot()
        name = f"{_PREFIX}_slice_duration_seconds"
        lines = [
            f"# HELP {name} Time the loop thread spent in each callback slice.",
            f"# TYPE {name} histogram",
        ]
        for bound, n in snap["buckets"]:
            lines.append(f'{name}_bucket{{le="{bound}"}} {n}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {snap["slice_count"]}')
        lines.append(f"{name}_sum {snap['slice_sum']:.9f}")
        lines.append(f"{name}_count {snap['slice_count']}")
        name = f"{_PREFIX}_blocks_total"
        lines += [
            f"# HELP {name} Blocking slices reported, by kind.",
            f"# TYPE {name} counter",
        ]
        for kind, n in sorted(snap["blocks_by_kind"].items()):
            lines.append(f'{name}{{kind="{kind}"}} {n}')
        for series, key, text, fmt in _CAUSE_SERIES:
            name = f"{_PREFIX}_{series}"
            lines += [f"# HELP {name} {text}", f"# TYPE {name} counter"]
            for cause, v in sorted(snap[key].items()):
                lines.append(f'{name}{{cause="{cause}"}} {v:{fmt}}')
        name = f"{_PREFIX}_loop_lag_seconds"
        lines += [
            f"# HELP {name} Longest slice since the previous scrape.",
            f"# TYPE {name} gauge",
            f"{name} {snap['loop_lag']:.9f}",
        ]
        return "\n".join(lines) + "\n"

    def register_prometheus_client(self, registry: Any = None) -> bool:
        """Expose these series via prometheus_client if it is installed. Returns success."""
        try:
            from prometheus_client import REGISTRY
            from prometheus_client.core import (
                CounterMetricFamily,
                GaugeMetricFamily,
                HistogramMetricFamily,
            )
        except ImportError:
            return False
        outer = self

        class _Collector:
            def collect(self):
                snap = outer.snapshot()
                h = HistogramMetricFamily(
                    f"{_PREFIX}_slice_duration_seconds", "Time spent in each callback slice."
                )
                h.add_metric(
                    [],
                    [(str(b), n) for b, n in snap["buckets"]] + [("+Inf", snap["slice_count"])],
                    snap["slice_sum"],
                )
                yield h
                c = CounterMetricFamily(
                    f"{_PREFIX}_blocks", "Blocking slices reported, by kind.", labels=["kind"]
                )
                for kind, n in snap["blocks_by_kind"].items():
                    c.add_metric([kind], n)
                yield c
                for series, key, text, _ in _CAUSE_SERIES:
                    c = CounterMetricFamily(
                        f"{_PREFIX}_{series.removesuffix('_total')}", text, labels=["cause"]
                    )
                    for cause, v in snap[key].items():
                        c.add_metric([cause], v)
                    yield c
                yield GaugeMetricFamily(
                    f"{_PREFIX}_loop_lag_seconds",
                    "Longest slice since the previous scrape.",
                    value=snap["loop_lag"],
                )

        (registry or REGISTRY).register(_Collector())
        return True


_CAUSE_SERIES = (
    ("block_causes_total", "blocks_by_cause", "Blocks in which each cause had a share.", "d"),
    ("block_seconds_total", "seconds_by_cause", "Seconds of blocked loop, by cause.", ".9f"),
)

metrics = PrometheusMetrics()
_mon._block_listeners.append(metrics.on_block)
