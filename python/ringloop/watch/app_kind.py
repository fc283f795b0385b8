"""What kind of time a block's application share was: its I/O, `cpu`, `wait` or `unknown`.

The share is what is left of a slice once the causes outside the application (collections,
the GIL, starvation, throttling) are taken out, so its CPU fraction is a difference of
readings; this module decides, from that fraction or the samples' absence, which kind the
readings can vouch for, and says `unknown` where they cannot.
"""

from __future__ import annotations

from collections import Counter

from . import causes
from .block import Block


def outside_gc(
    share: float,
    window: tuple[int, bool, list | None],
    start_ns: int,
    end_ns: int,
    thread_ident: int,
    waits_ns: int = 0,
) -> float | None:
    """The application's own CPU share in the slice ``[start_ns, end_ns]``, from the
    sampler's share over ``[window start, end_ns]`` with the loop thread's collections in that
    window taken out. ``window[1]``: the share counts the time the thread waited for a CPU
    (the native sampler's, a schedstat busy clock's), in which a collection wanted one
    throughout and counts whole, and ``waits_ns`` (the slice's `starved` and `throttled`
    shares, booked outside its collections) is taken out too; else only CPU time counts (a
    bare CPU clock's). ``window[2]``: the native sampler's ``(time, running)`` samples, which
    are counted outside the collections directly (None: a clock's reading).

    None where the result cannot be trusted to the side of `kind`'s cut it falls on:
    - the window saw under a quarter of the application's time (a Python watchdog that armed
      only after a sleep: the loop thread's CPU clock at the slice's start is never read, so
      nothing tells the sleep from a spin);
    - the estimate's error covers the cut. A share over a whole 500 ms slice less a 425 ms
      collection leaves 80 ms carrying the share's whole error: 250 samples are good to about
      ±12 ms of it (one standard error), and stop 29's CI read an 80 ms sleep at 0.28 of its
      time, just over the cut. Counting only the samples outside the collections, the error
      is that of those samples' count alone."""
    lo, counts_waits, states = window
    lo = max(lo, start_ns)
    wall = end_ns - lo
    gc_w, _, _, _, _, gc_cpu = causes.gc_sum(thread_ident, lo, end_ns)
    rest = wall - gc_w
    app_ns = end_ns - start_ns - causes.gc_in(thread_ident, start_ns, end_ns)[0]
    if rest <= 0 or rest * 4 < app_ns:
        return None
    waits = min(waits_ns, rest) if counts_waits else 0
    if states:
        spans = causes.gc_spans(thread_ident, lo, end_ns)
        outside = [r for t, r in states if not any(s <= t < e for s, e in spans)]
        n = len(outside)
        if not n:
            return None
        p = sum(outside) / n
        busy = p * rest
        # Three standard errors of a count, plus one sample's worth (where in its interval
        # each sample fell).
        err = (3 * (p * (1 - p) / n) ** 0.5 + 1 / n) * rest
    else:
        spent = gc_w if counts_waits or gc_cpu is None else min(gc_w, gc_cpu)
        busy = share * wall - spent
        # Clocks read at the edges: their reads and the collections' callbacks, ~1 ms each.
        err = 2_000_000 + 0.01 * gc_w
    own = rest - waits
    if own <= 0:
        return None
    frac = max(0.0, min(1.0, (busy - waits) / own))
    if abs(frac - CPU_CUT) * own < err:
        return None
    return frac


CPU_CUT = 0.25  # `kind`: an application's CPU share at or above this is `cpu`, below `wait`


def kind(
    b: Block,
    samples: list,
    unsampled_ns: int,
    arm_ns: int,
    app_frac: float | None,
    whole: float | None,
) -> str:
    """The kind of the application's own time: the I/O its line did, else `cpu` or `wait`.
    ``whole``: the sampler's CPU share over the slice, where no collection is in it.
    ``unsampled_ns``: how long the armed watchdog could have sampled (`_unsampled`)."""
    # The application's own CPU fraction (the other causes' time taken out) tells a wait from
    # a spin in a slice that also held a collection; but its baseline can be read late, and a
    # 60 ms sleep then came out at 0.35. The sampler's fraction over a slice without a
    # collection is never above the truth for a wait, so the lower of the two decides.
    fracs = [f for f in (app_frac, whole) if f is not None]
    b_frac = min(fracs) if fracs else None
    if b.io_events:
        io_kind = Counter(e.kind for e in b.io_events).most_common(1)[0][0]
        if b_frac is None or b.line is None:
            return io_kind
        # I/O happened, but did the time go there? Only if the blamed line made an I/O call.
        lines = {(e.where[0], e.where[1]) for e in b.io_events if e.where}
        if (b.line.filename, b.line.lineno) in lines:
            return io_kind
    if b_frac is not None:
        # Off-CPU means the thread waited: a sleep, a lock, a socket, a pipe, a disk. A
        # waiting thread uses ~0 % CPU; a busy one can get well under 100 % on a loaded
        # machine, hence the low cut.
        return "cpu" if b_frac >= CPU_CUT else "wait"
    if not samples and unsampled_ns > 2 * arm_ns + 5_000_000:
        # The watchdog never got the GIL and no other thread was found holding it: one C call
        # of the loop thread's own held it throughout.
        return "cpu"
    return "unknown"
