//! One loop iteration (`_run_once`), timed slices, and the end-of-iteration flush.
//!
//! An iteration mirrors asyncio's order exactly, because programs depend on it:
//! 1. wait in the reactor — not at all if callbacks are ready, a read is held or `stop()` was
//!    called, else until the earliest timer (never early: deadlines are rounded up to the
//!    nanosecond and epoll's milliseconds are rounded up too);
//! 2. queue the callbacks of completed operations and ready fds, then the expired timers (so
//!    `call_later(0)` runs after callbacks that were already queued);
//! 3. run exactly the callbacks queued so far — anything they schedule, and the deliveries the
//!    router put `later` (an EOF behind data), run next iteration;
//! 4. flush: everything that coalesced writes during the iteration (`flush::FlushAtEnd`)
//!    sends them, one `sendmsg` each.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::core::{closed_error, LoopCore};
use super::flush::{FlushAtEnd, FlushEntry};
use super::handle::AnyHandle;
use crate::errors::os_error;
use crate::reactor::sys::monotonic_ns;
use crate::watch::audit::{end_slice, set_eager};
use crate::watch::sampler::slice_end_readings;
use crate::watch::slice::set_in_slice;

/// asyncio's MAXIMUM_SELECT_TIMEOUT: never sleep longer than a day in one wait.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

impl LoopCore {
    /// Queue `obj`'s coalesced writes for the end of this iteration.
    pub(crate) fn queue_flush<T: FlushAtEnd>(slf: &Bound<'_, Self>, obj: Py<T>) -> PyResult<()> {
        let this = slf.get();
        this.flush.borrow_mut(slf.py())?.push(FlushEntry::new(obj));
        this.flush_pending.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The number of the iteration running now.
    #[inline]
    pub(crate) fn iteration(&self) -> u64 {
        self.iteration.load(Ordering::Relaxed)
    }

    /// One loop iteration (see the module docs for the order).
    fn run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        // Only this thread writes it (under the GIL): a plain load and store, no locked add.
        this.iteration.store(this.iteration.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        Self::drop_cancelled_timers(slf)?;

        // From the emptiness check to the wait no Python code runs and we hold the GIL, so no
        // other thread can queue a callback in between; once the GIL is released for the wait,
        // `needs_wake` tells `call_soon_threadsafe` to wake the reactor.
        let held = this.router.borrow(py)?.has_held();
        let timeout = {
            let q = this.queues.borrow(py)?;
            if !q.ready.is_empty() || held || this.stopping.load(Ordering::Relaxed) {
                Some(Duration::ZERO)
            } else {
                this.needs_wake.store(true, Ordering::SeqCst);
                q.timers.peek_when().map(|w| Duration::from_nanos(w.saturating_sub(monotonic_ns())).min(MAX_WAIT))
            }
        };
        let (mut events, has_completions) = {
            let mut io_ref = this.io.borrow_mut(py)?;
            let io = &mut *io_ref;
            let mut events = std::mem::take(&mut io.events);
            events.clear();
            let completions = &mut io.completions;
            let reactor = io.reactor.as_mut().ok_or_else(closed_error)?;
            let res = if timeout == Some(Duration::ZERO) {
                reactor.poll(timeout, &mut events, completions)
            } else {
                let r = py.detach(|| reactor.poll(timeout, &mut events, completions));
                this.needs_wake.store(false, Ordering::SeqCst);
                r
            };
            res.map_err(os_error)?;
            (events, !io.completions.is_empty())
        };
        // I/O first, then timers, as asyncio orders them.
        let later = if has_completions || held { Self::dispatch(slf)? } else { Vec::new() };
        {
            let fds = this.fds.borrow(py)?;
            let mut q = this.queues.borrow_mut(py)?;
            let q = &mut *q;
            for ev in &events {
                if let Some(cbs) = fds.get(&ev.fd) {
                    if ev.readable {
                        if let Some(h) = &cbs.reader {
                            q.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
                        }
                    }
                    if ev.writable {
                        if let Some(h) = &cbs.writer {
                            q.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
                        }
                    }
                }
            }
            if !q.timers.is_empty() {
                let now = monotonic_ns();
                while let Some(h) = q.timers.pop_expired(now) {
                    if let Some(t) = &h.get().core.timer {
                        t.scheduled.store(false, Ordering::Relaxed);
                    }
                    // A cancelled one would only be skipped below; it is dropped there,
                    // outside this borrow.
                    q.ready.push_back(AnyHandle::Timer(h));
                }
            }
        }
        events.clear();
        if let Ok(mut io) = this.io.borrow_mut(py) {
            io.events = events;
        }
        // Signals that interrupted the wait run their Python handlers now; KeyboardInterrupt
        // from the default SIGINT handler leaves run_forever here, as in asyncio.
        py.check_signals()?;

        // The `later` ones go behind everything queued so far: they run next iteration.
        let ntodo = if later.is_empty() {
            this.queues.borrow(py)?.ready.len()
        } else {
            let mut q = this.queues.borrow_mut(py)?;
            let n = q.ready.len();
            q.ready.extend(later.into_iter().map(AnyHandle::Plain));
            n
        };
        let timing = this.timing.load(Ordering::Relaxed);
        for _ in 0..ntodo {
            let Some(h) = this.queues.borrow_mut(py)?.ready.pop_front() else { break };
            if h.core().is_cancelled() {
                continue;
            }
            if !timing {
                h.run(py)?;
            } else {
                Self::run_timed(slf, &h)?;
            }
        }
        Self::flush_queued(slf)
    }

    /// Discard cancelled timers before deciding how long to sleep; drop them only after the
    /// borrow ends (their callbacks' `__del__` may schedule more work).
    fn drop_cancelled_timers(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let dead = {
            let mut q = slf.get().queues.borrow_mut(py)?;
            let mut dead = q.timers.sweep(|h| h.get().core.is_cancelled());
            while q.timers.peek().is_some_and(|h| h.get().core.is_cancelled()) {
                let h = q.timers.pop().expect("peeked");
                q.timers.note_removed_cancelled();
                dead.push(h);
            }
            dead
        };
        for h in &dead {
            if let Some(t) = &h.get().core.timer {
                t.scheduled.store(false, Ordering::Relaxed);
            }
        }
        drop(dead);
        Ok(())
    }

    /// Send the writes coalesced during this iteration (one `sendmsg` each).
    fn flush_queued(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if !this.flush_pending.load(Ordering::Relaxed) {
            return Ok(());
        }
        this.flush_pending.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *this.flush.borrow_mut(py)?);
        let mut it = list.into_iter();
        while let Some(entry) = it.next() {
            let Err(e) = (entry.flush)(entry.obj.bind(py)) else { continue };
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                // Leaving run_forever: the others still flush at the next iteration.
                this.flush.borrow_mut(py)?.extend(it);
                this.flush_pending.store(true, Ordering::Relaxed);
                return Err(e);
            }
            let ctx = PyDict::new(py);
            ctx.set_item("message", "Exception in a stream transport's write flush")?;
            ctx.set_item("exception", e.into_value(py))?;
            slf.call_method1("call_exception_handler", (ctx,))?;
        }
        Ok(())
    }

    /// Run one callback with its slice timed: debug mode's slow-callback warning and the
    /// watch's `on_slow` hook both read the same two clock readings.
    #[inline(never)]
    fn run_timed(slf: &Bound<'_, Self>, h: &AnyHandle) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let w = &this.watch;
        let t0 = monotonic_ns();
        w.slice.seq.fetch_add(1, Ordering::Relaxed);
        w.slice.start_ns.store(t0, Ordering::Release);
        let audit = w.audit.load(Ordering::Relaxed);
        if audit != 0 {
            set_eager(audit == 2);
            set_in_slice(true);
        }
        let r = h.run(py);
        let t1 = monotonic_ns();
        let dt = t1.saturating_sub(t0);
        let wt = w.threshold_ns.load(Ordering::Relaxed);
        let slow = wt != 0 && dt >= wt;
        if slow {
            let bt = w.block_ns.load(Ordering::Relaxed);
            if bt != 0 && dt >= bt {
                // Before anything else runs on this thread: the watch's breakdown by cause
                // needs the clocks at the slice's end, not after its own reporting work.
                if let Ok(mut end) = w.block_end.borrow_mut(py) {
                    *end = slice_end_readings(t1);
                }
            }
        }
        let events = if audit != 0 {
            set_in_slice(false);
            end_slice(slow)
        } else {
            Vec::new()
        };
        w.slice.start_ns.store(0, Ordering::Release);
        if let Ok(mut st) = w.stats.borrow_mut(py) {
            st.record(dt);
        }
        r?;
        if this.debug.load(Ordering::Relaxed) && dt >= this.slow_callback_ns.load(Ordering::Relaxed) {
            slf.call_method1("_log_slow_callback", (h.as_any(), dt as f64 / 1e9))?;
        }
        if !events.is_empty() {
            // Only a slow slice's events are read; a short slice's were dropped unread.
            let old = std::mem::replace(&mut *w.slow_audit.borrow_mut(py)?, events);
            drop(old);
        }
        if slow {
            let hook = w.hook.borrow(py)?.as_ref().map(|h| h.clone_ref(py));
            if let Some(hook) = hook {
                if let Err(e) = hook.call1(py, (h.as_any(), t0, dt)) {
                    // A broken hook must not break the program it watches.
                    e.write_unraisable(py, Some(hook.bind(py)));
                }
            }
        }
        Ok(())
    }
}

#[pymethods]
impl LoopCore {
    fn _run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run_once(slf)
    }

    /// The body of `run_forever`: iterate until `stop()`. The Python half sets up and tears
    /// down (running-loop registration, async-generator hooks) around it.
    fn _run_forever_native(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let tstate = &this.watch.tstate;
        // SAFETY: we hold the GIL, so this thread has a current thread state.
        tstate.tstate.store(unsafe { pyo3::ffi::PyThreadState_Get() }, Ordering::Release);
        // SAFETY: pthread_self has no preconditions.
        tstate.pthread.store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
        // SAFETY: gettid has no preconditions.
        tstate.tid.store(unsafe { libc::gettid() }, Ordering::Release);
        let r = loop {
            if let Err(e) = Self::run_once(slf) {
                break Err(e);
            }
            if this.stopping.load(Ordering::Relaxed) {
                break Ok(());
            }
        };
        tstate.pthread.store(0, Ordering::Release);
        tstate.tid.store(0, Ordering::Release);
        tstate.tstate.store(std::ptr::null_mut(), Ordering::Release);
        r
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Wake the loop from its wait (asyncio's name for the self-pipe write).
    fn _write_to_self(&self) {
        self.waker.wake();
    }
}
