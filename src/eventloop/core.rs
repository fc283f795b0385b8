//! `LoopCore`: the native half of `ringloop.Loop`, and what its state is made of.
//!
//! The Python half (`python/ringloop/loop.py`) subclasses it together with
//! `asyncio.BaseEventLoop` and keeps the subtle, rarely-hot semantics (run_until_complete,
//! executors, getaddrinfo, signals, async generators). The native half is split by concern,
//! each room with its own `#[pymethods]`:
//! - this file: the state, construction, `close()`'s native part and the GC protocol;
//! - `schedule`: `call_soon*`, `call_later`, `call_at` and the handles they make;
//! - `fd_registry`: `add_reader`/`add_writer` and friends;
//! - `completions`: multishot operations (io_uring) — arming, stopping, and turning the
//!   router's decisions (`router`, no PyO3) into callbacks;
//! - `iteration`: one loop iteration, timed slices and the end-of-iteration flush;
//! - `compat`: the attributes and small methods asyncio's code expects of a loop;
//! - `watch_hooks`: what `ringloop.watch` asks of the loop.
//!
//! Invariants: no borrow of a `GilCell` is held while Python code runs (callbacks, `__del__`
//! of a dropped handle, logging, even an allocation that may trigger the cycle collector);
//! handles leave the queues before they are dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::fd_table::FdRegistry;
use super::flush::FlushEntry;
use super::gil_cell::GilCell;
use super::handle::{AnyHandle, TimerHandle};
use super::router::Router;
use super::timers::TimerHeap;
use crate::errors::os_error;
use crate::reactor::{Choice, Event, OpCompletion, Reactor, Waker};
use crate::watch::audit::Recorded;
use crate::watch::sampler::{Sampler, ThreadStateCell};
use crate::watch::slice::{SliceClock, SliceStats};

/// Who gets an operation's completions: the callback and the context it runs in (copied when
/// the operation started, as asyncio's reader handle copies it).
pub struct OpCallback {
    pub(crate) callback: Py<PyAny>,
    pub(crate) context: Py<PyAny>,
}

impl OpCallback {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.callback)?;
        visit.call(&self.context)
    }
}

/// The callbacks waiting to run: the ready queue and the timer heap.
#[derive(Default)]
pub(crate) struct Queues {
    pub(crate) ready: std::collections::VecDeque<AnyHandle>,
    pub(crate) timers: TimerHeap<Py<TimerHandle>>,
}

/// The reactor and the buffers one wait fills (kept to reuse their allocations).
pub(crate) struct ReactorSlot {
    /// `None` once the loop is closed.
    pub(crate) reactor: Option<Reactor>,
    pub(crate) events: Vec<Event>,
    pub(crate) completions: Vec<OpCompletion>,
}

/// What the watch set on this loop (see `watch_hooks`).
#[derive(Default)]
pub(crate) struct WatchState {
    pub(crate) threshold_ns: AtomicU64,
    pub(crate) hook: GilCell<Option<Py<PyAny>>>,
    /// A slow slice at least this long (0: none) is a block: the dispatcher reads the loop
    /// thread's clocks as it ends, into `block_end` (`slice_end_readings`).
    pub(crate) block_ns: AtomicU64,
    pub(crate) block_end: GilCell<Option<(u64, u64, u64)>>,
    /// I/O audit events raised inside timed slices: 0 off, 1 buffered (handed over only for
    /// slow slices), 2 eager (strict mode: every event straight to the sink).
    pub(crate) audit: AtomicU8,
    /// Audit events of the last slow slice, for `_slice_audit_events`.
    pub(crate) slow_audit: GilCell<Vec<Recorded>>,
    pub(crate) sampler: GilCell<Option<Sampler>>,
    pub(crate) stats: GilCell<SliceStats>,
    /// The loop thread's PyThreadState while `run_forever` runs (for the native sampler).
    pub(crate) tstate: ThreadStateCell,
    pub(crate) slice: Arc<SliceClock>,
}

#[pyclass(module = "ringloop._core", frozen, subclass, weakref)]
pub struct LoopCore {
    pub(crate) queues: GilCell<Queues>,
    pub(crate) fds: GilCell<FdRegistry>,
    pub(crate) router: GilCell<Router<OpCallback>>,
    pub(crate) io: GilCell<ReactorSlot>,
    pub(crate) waker: Arc<Waker>,
    pub(crate) backend: &'static str,
    pub(crate) fallback_reason: Option<String>,
    pub(crate) closed: AtomicBool,
    pub(crate) stopping: AtomicBool,
    pub(crate) debug: AtomicBool,
    /// The loop is (about to be) blocked in the reactor: threadsafe calls must wake it.
    pub(crate) needs_wake: AtomicBool,
    pub(crate) slow_callback_ns: AtomicU64,
    /// Time every slice (debug mode or the watch is on).
    pub(crate) timing: AtomicBool,
    pub(crate) watch: WatchState,
    /// Counts `_run_once` calls: a stream transport sends directly at most once per iteration
    /// and coalesces its later writes (see `transport::stream`).
    pub(crate) iteration: AtomicU64,
    /// Writes to send once this iteration's callbacks ran (see `flush::FlushAtEnd`).
    pub(crate) flush: GilCell<Vec<FlushEntry>>,
    /// `flush` is not empty: one plain load per iteration instead of a borrow.
    pub(crate) flush_pending: AtomicBool,
}

pub(crate) fn closed_error() -> PyErr {
    PyRuntimeError::new_err("Event loop is closed")
}

impl LoopCore {
    #[inline]
    pub(crate) fn check_open(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Relaxed) {
            Err(closed_error())
        } else {
            Ok(())
        }
    }

    /// Time slices when debug mode or the watch needs it.
    pub(crate) fn update_timing(&self) {
        let on = self.debug.load(Ordering::Relaxed) || self.watch.threshold_ns.load(Ordering::Relaxed) != 0;
        self.timing.store(on, Ordering::Relaxed);
    }
}

#[pymethods]
impl LoopCore {
    #[new]
    #[pyo3(signature = (*_args, backend = None, thread_bound = false, **_kwargs))]
    fn py_new(_args: &Bound<'_, PyTuple>, backend: Option<&str>, thread_bound: bool, _kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let env = std::env::var("RINGLOOP_BACKEND").ok();
        let name = backend.map(str::to_owned).or(env).unwrap_or_default();
        let choice = Choice::parse(&name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown ringloop backend {name:?}: expected 'auto', 'io_uring' or 'epoll' \
                 (from backend= or RINGLOOP_BACKEND)"
            ))
        })?;
        // RINGLOOP_THREAD_BOUND=1 makes every loop thread-bound (a deployment whose loops each
        // stay on one thread, e.g. through asyncio.run and ringloop.install()).
        let thread_bound = thread_bound || std::env::var("RINGLOOP_THREAD_BOUND").is_ok_and(|v| v == "1");
        let (reactor, fallback_reason) = Reactor::new(choice, thread_bound).map_err(os_error)?;
        Ok(LoopCore {
            queues: GilCell::new(Queues::default()),
            fds: GilCell::new(FdRegistry::default()),
            router: GilCell::new(Router::default()),
            waker: reactor.waker().clone(),
            backend: reactor.name(),
            io: GilCell::new(ReactorSlot {
                reactor: Some(reactor),
                events: Vec::with_capacity(256),
                completions: Vec::with_capacity(256),
            }),
            fallback_reason,
            closed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            debug: AtomicBool::new(false),
            needs_wake: AtomicBool::new(false),
            slow_callback_ns: AtomicU64::new(100_000_000),
            timing: AtomicBool::new(false),
            watch: WatchState::default(),
            iteration: AtomicU64::new(0),
            flush: GilCell::new(Vec::new()),
            flush_pending: AtomicBool::new(false),
        })
    }

    /// Forget every callback and release the reactor. Called by `close()`.
    fn _close_native(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.closed.store(true, Ordering::Relaxed);
        let (ready, timers) = {
            let mut q = this.queues.borrow_mut(py)?;
            (std::mem::take(&mut q.ready), q.timers.drain())
        };
        for h in &timers {
            if let Some(t) = &h.get().core.timer {
                t.scheduled.store(false, Ordering::Relaxed);
            }
        }
        let fds = std::mem::take(&mut *this.fds.borrow_mut(py)?);
        let (ops, _unread) = this.router.borrow_mut(py)?.drain();
        // The buffers of reads nobody took go with the reactor's rings.
        let reactor = this.io.borrow_mut(py)?.reactor.take();
        let hook = this.watch.hook.borrow_mut(py)?.take();
        let sampler = this.watch.sampler.borrow_mut(py)?.take();
        let slow_audit = std::mem::take(&mut *this.watch.slow_audit.borrow_mut(py)?);
        let flush = std::mem::take(&mut *this.flush.borrow_mut(py)?);
        drop((ready, timers, fds, ops, reactor, hook, slow_audit, flush));
        // The reactor is gone, so nothing polls the eventfd: release it now.
        this.waker.close();
        // Joining the watchdog thread: it never takes the GIL, so waiting with it held is safe.
        drop(sampler);
        Ok(())
    }

    /// Counts for tests and `repr`: ready callbacks, scheduled timers, fds watched.
    fn _stats(&self, py: Python<'_>) -> PyResult<(usize, usize, usize)> {
        let q = self.queues.borrow(py)?;
        Ok((q.ready.len(), q.timers.len(), self.fds.borrow(py)?.len()))
    }

    /// Reads taken straight from a socket because the provided-buffer ring ran dry (see the
    /// router's rules): for tests that must reach that path.
    fn _starved_reads(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.router.borrow(py)?.starved_reads)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(q) = self.queues.try_borrow_unattached() {
            for h in &q.ready {
                visit.call(h.as_any())?;
            }
            for h in q.timers.iter() {
                visit.call(h)?;
            }
        }
        if let Some(fds) = self.fds.try_borrow_unattached() {
            fds.traverse(&visit)?;
        }
        if let Some(r) = self.router.try_borrow_unattached() {
            for op in r.ops() {
                op.who.traverse(&visit)?;
                if let Some(then) = op.then() {
                    then.traverse(&visit)?;
                }
            }
        }
        if let Some(h) = self.watch.hook.try_borrow_unattached() {
            visit.call(&*h)?;
        }
        if let Some(list) = self.flush.try_borrow_unattached() {
            for e in list.iter() {
                visit.call(e.object())?;
            }
        }
        if let Some(ev) = self.watch.slow_audit.try_borrow_unattached() {
            for r in ev.iter() {
                visit.call(&r.args)?;
                visit.call(&r.frame)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        // SAFETY: tp_clear runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        let queues = self.queues.borrow_mut(py).ok().map(|mut q| std::mem::take(&mut *q));
        let fds = self.fds.borrow_mut(py).ok().map(|mut f| std::mem::take(&mut *f));
        let ops = self.router.borrow_mut(py).ok().map(|mut r| r.drain());
        let hook = self.watch.hook.borrow_mut(py).ok().and_then(|mut h| h.take());
        let flush = self.flush.borrow_mut(py).ok().map(|mut f| std::mem::take(&mut *f));
        drop((queues, fds, ops, hook, flush));
    }
}
