"""The I/O a slice did: audit events recorded on the slice's `SliceState`, classified.

Shared by the monitor (events from the Python audit hook, recorded as they happen in strict
mode, or classified only once a slice turns out slow) and the native backend (events ringloop's
C-level hook buffered during a slow slice). Classifying walks frames and formats arguments,
which costs microseconds, so it happens only for events that will be reported.
"""

from __future__ import annotations

from typing import Any

from . import audit
from .audit import IoEvent, classify

MAX_IO_EVENTS = 256  # per slice; a slice that opens thousands of files needs no more proof

_KIND_GET = audit.EVENT_KINDS.get


def record_io(
    st: Any, event: str, args: tuple, frame, t_ns: int, seq: int, notify: bool = True
) -> None:
    """Record one audit event of slice `seq` on `st`. `notify`: in strict mode, the first
    event of a slice tells the backend (a short slice with I/O must still be reported)."""
    if st.io_seq != seq:  # events of an earlier (short, unreported) slice: drop them
        st.io_events = []
        st.io_seq = seq
    elif len(st.io_events) >= MAX_IO_EVENTS:
        return
    res = classify(event, args, frame)
    if res is None:
        return
    kind, where = res
    st.io_events.append(IoEvent(kind, event, audit._detail(event, args), where, t_ns))
    if notify and st.strict and len(st.io_events) == 1:
        st.monitor.backend.io_noted()


def record_buffered(st: Any, events: list) -> None:
    """Events the native hook buffered during the slow slice that just ended (ringloop's
    buffered audit mode): `[(event, args, frame, t_ns)]`, recorded for that slice."""
    for event, args, frame, t_ns in events:
        if _KIND_GET(event) is not None:
            record_io(st, event, args, frame, t_ns, st.seq, notify=False)
