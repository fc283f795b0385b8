"""ringloop.watch: find synchronous work that blocks the event loop, and the line that did it.

Works on ringloop's native loop (exact per-callback timing in the dispatcher), stock asyncio
(``Handle._run`` wrapped) and uvloop or any other loop (heartbeat lag). This package must
import without ``ringloop._core``: it is the fallback for loops that are not ringloop's.

Public API: `no_blocking`, `BlockingError`, `BlockingWarning`, `Block`, `start`, `stop`,
`activate`, `deactivate`, `is_active`, `no_task_leaks`, `no_thread_leaks`, `TaskLeakError`,
`ThreadLeakError`, `metrics`, `set_stack_sampler`, `set_audit_source`; and pyleak's names
`no_event_loop_blocking` and `EventLoopBlockError` as migration aliases (compat.py).
"""

from __future__ import annotations

from .audit import AuditSource, IoEvent, PyAuditHookSource
from .block import Block
from .compat import EventLoopBlockError, no_event_loop_blocking
from .leaks import TaskLeakError, ThreadLeakError, no_task_leaks, no_thread_leaks
from .metrics import PrometheusMetrics, metrics
from .production import activate, deactivate, is_active, start, stop
from .scopes import BlockingError, BlockingWarning, no_blocking
from .stacks import PythonStackSampler, StackSampler
from .watchdog import set_sampler as set_stack_sampler


def set_audit_source(source: AuditSource) -> None:
    """Replace where audit events come from (the native loop's C-level hook, later)."""
    from . import monitor

    monitor.audit_source.uninstall()
    monitor.audit_source = source


__all__ = [
    "AuditSource",
    "Block",
    "BlockingError",
    "BlockingWarning",
    "EventLoopBlockError",
    "IoEvent",
    "PrometheusMetrics",
    "PyAuditHookSource",
    "PythonStackSampler",
    "StackSampler",
    "TaskLeakError",
    "ThreadLeakError",
    "activate",
    "deactivate",
    "is_active",
    "metrics",
    "no_blocking",
    "no_event_loop_blocking",
    "no_task_leaks",
    "no_thread_leaks",
    "set_audit_source",
    "set_stack_sampler",
    "start",
    "stop",
]
