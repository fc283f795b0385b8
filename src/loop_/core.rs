//! `LoopCore`: the native half of `ringloop.Loop` — ready queue, timers, fd callbacks and the
//! dispatcher. The Python half (`python/ringloop/loop.py`) subclasses it together with
//! `asyncio.BaseEventLoop` and keeps the subtle, rarely-hot semantics (run_until_complete,
//! executors, getaddrinfo, signals, async generators); everything here runs once per callback
//! or once per iteration.
//!
//! One iteration (`_run_once`) mirrors asyncio's order exactly, because programs depend on it:
//! 1. wait in the reactor — not at all if callbacks are ready or `stop()` was called, else
//!    until the earliest timer (never early: deadlines are rounded up to the nanosecond and
//!    epoll's milliseconds are rounded up too);
//! 2. queue the callbacks of ready fds, then the expired timers (so `call_later(0)` runs after
//!    callbacks that were already queued);
//! 3. run exactly the callbacks queued so far; anything they schedule runs next iteration.
//!
//! Invariants: no borrow of `st`/`io` is held while Python code runs (callbacks, `__del__` of a
//! dropped handle, logging); handles leave the queues before they are dropped.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::intern;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::gil_cell::GilCell;
use super::handle::{AnyHandle, Args, Handle, HandleCore, TimerHandle, TimerInfo};
use super::timers::TimerHeap;
use crate::errors::os_error;
use crate::reactor::sys::{bytes_waiting, monotonic_ns};
use crate::reactor::uring::{op_token, op_token_parts};
use crate::reactor::{Choice, Event, OpCompletion, Reactor, Waker};
use crate::transport::stream::StreamIO;
use crate::watch::sampler::{Sample, Sampler, ThreadStateCell};
use crate::watch::audit::{end_slice, set_eager, Recorded};
use crate::watch::slice::set_in_slice;

/// asyncio's MAXIMUM_SELECT_TIMEOUT: never sleep longer than a day in one wait.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// `(event, args, frame, t_ns)` of one buffered audit event, as Python receives it.
type AuditTuple = (String, Py<PyAny>, Option<Py<PyAny>>, u64);

/// `(reader, writer)` handles of one fd.
type FdHandles = (Option<Py<Handle>>, Option<Py<Handle>>);

#[derive(Default)]
struct FdCallbacks {
    reader: Option<Py<Handle>>,
    writer: Option<Py<Handle>>,
    /// The file object the last `add_reader`/`add_writer` named (`None` for a plain int):
    /// asyncio's selector finds a registration through it once the object is closed and its
    /// `fileno()` says -1, and a closed one marks the fd's other callback as stale.
    fileobj: Option<Py<PyAny>>,
}

/// What a multishot operation is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A stream transport's recv: items are a pending read (`n > 0`, see `take_read`), `0`
    /// (EOF) or `-errno`.
    Recv,
    /// A server's accept: items are a new connection's fd or `-errno`.
    Accept,
    /// A UDP transport's recvmsg: items are one datagram each (`n > 0`, see `take_datagram`)
    /// or `-errno` (for `error_received`; reading goes on, as in asyncio).
    RecvMsg,
}

/// A multishot operation (io_uring) and who gets its completions, by operation token.
struct MultishotOp {
    kind: OpKind,
    /// Called with each completion's item (see `OpKind`): `StreamIO._on_recv`,
    /// `DatagramIO._on_datagram`, or the server's `_on_accepted`.
    callback: Py<PyAny>,
    /// The context the callbacks run in (copied when the operation started, as asyncio's
    /// reader handle copies it).
    context: Py<PyAny>,
    /// Stopped: completions still in flight are delivered (a paused transport keeps them),
    /// and the entry goes with the operation's last completion.
    stopping: bool,
    /// Queued (with `None`) right behind the operation's last completion, once it was stopped
    /// with `read_stop_then`: the transport's cue that no read of this operation is left.
    then: Option<Py<PyAny>>,
}

/// The largest `bytes` one gathered read builds: asyncio's `max_size`, the most one `recv`
/// asks for. Past this size a batch's data goes out in several `data_received` calls.
const MAX_GATHER: usize = 256 * 1024;

/// A gathered read at least this large is held back one iteration when its socket already
/// holds more bytes: a large send arrives as several segments, and the multishot recv fires
/// on the first, so without the hold one message became two `data_received` calls (and two
/// replies) about a third of the time at 100 KiB. Smaller reads skip the check (an ioctl).
const HOLD_MIN: usize = 32 * 1024;

/// One callback `dispatch_ops` queues for a completion.
struct OpCall {
    token: u64,
    callback: Py<PyAny>,
    /// What the callback receives (see `OpKind`).
    item: Py<PyAny>,
    context: Py<PyAny>,
    /// Queue it behind this iteration's callbacks (an EOF or error right behind data).
    later: bool,
    /// A pending read still gathering buffers: its slot in `State::reads` and its size.
    gathering: Option<(usize, usize)>,
    /// Already held back once (see `HOLD_MIN`): delivered with the next batch, whatever comes.
    held: bool,
}

/// A read's bytes still in their provided buffers (io_uring), taken by the transport whose
/// read it is (`LoopCore::take_read`). Copied out front to back; each buffer goes back to the
/// kernel as soon as it is emptied, and whatever is left when this is dropped goes back too, so
/// no path can leak ring buffers. Holds buffer ids, not pointers: if the loop closes meanwhile,
/// the copies stop and nothing touches the unmapped ring.
pub(crate) struct PendingRead {
    loop_: Py<LoopCore>,
    chunks: Vec<(u16, usize)>,
    /// The first chunk not yet emptied, and how much of it was copied out.
    next: usize,
    off: usize,
    left: usize,
}

impl PendingRead {
    /// Bytes not yet copied out.
    pub(crate) fn len(&self) -> usize {
        self.left
    }

    /// Copy the next `min(dst.len(), len())` bytes into `dst`; returns how many.
    pub(crate) fn copy_to(&mut self, py: Python<'_>, dst: &mut [u8]) -> PyResult<usize> {
        let core = self.loop_.get();
        let mut io = core.io.borrow_mut(py)?;
        let Some(u) = io.reactor.as_mut().and_then(|r| r.uring()) else {
            // The loop closed under us: the buffers went with the ring.
            self.next = self.chunks.len();
            self.left = 0;
            return Ok(0);
        };
        let mut at = 0;
        while at < dst.len() && self.next < self.chunks.len() {
            let (bid, len) = self.chunks[self.next];
            let src = &u.buffer(bid, len)[self.off..];
            let n = src.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&src[..n]);
            at += n;
            self.off += n;
            if self.off == len {
                u.recycle(bid);
                self.next += 1;
                self.off = 0;
            }
        }
        u.publish_buffers();
        self.left -= at;
        Ok(at)
    }

    /// The rest as one exact-size `bytes`; `None` if the loop closed (the bytes are gone).
    pub(crate) fn into_bytes(mut self, py: Python<'_>) -> PyResult<Option<Bound<'_, PyBytes>>> {
        let total = self.left;
        // Not PyBytes::new_with, which zero-fills the buffer before we overwrite all of it.
        // SAFETY: a NULL source asks CPython for an uninitialised bytes of `total` bytes; the
        // result is checked, and every byte is written below before Python can see it.
        let raw = unsafe { pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), total as pyo3::ffi::Py_ssize_t) };
        if raw.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `raw` is a new reference to a bytes object we own.
        let bytes = unsafe { Bound::from_owned_ptr(py, raw) }.cast_into::<PyBytes>()?;
        // SAFETY: the object's buffer holds `total` bytes and nothing else references it yet.
        let dst = unsafe { std::slice::from_raw_parts_mut(pyo3::ffi::PyBytes_AsString(raw) as *mut u8, total) };
        // Short only when the loop closed; the half-written object is never shown.
        Ok((self.copy_to(py, dst)? == total).then_some(bytes))
    }
}

impl Drop for PendingRead {
    fn drop(&mut self) {
        if self.next == self.chunks.len() {
            return;
        }
        Python::attach(|py| {
            let core = self.loop_.get();
            if let Ok(mut io) = core.io.borrow_mut(py) {
                if let Some(u) = io.reactor.as_mut().and_then(|r| r.uring()) {
                    for &(bid, _) in &self.chunks[self.next..] {
                        u.recycle(bid);
                    }
                    u.publish_buffers();
                }
            }
        });
    }
}

/// A slot in `State::reads` for a new pending read (a free function, so `dispatch_ops` can
/// call it while it holds a multishot entry of the same `State`).
fn new_read(reads: &mut Vec<Option<Vec<(u16, usize)>>>, free: &mut Vec<usize>, chunks: Vec<(u16, usize)>) -> usize {
    match free.pop() {
        Some(i) => {
            reads[i] = Some(chunks);
            i
        }
        None => {
            reads.push(Some(chunks));
            reads.len() - 1
        }
    }
}

#[derive(Default)]
struct State {
    ready: VecDeque<AnyHandle>,
    timers: TimerHeap<Py<TimerHandle>>,
    fds: HashMap<RawFd, FdCallbacks>,
    multishots: HashMap<u64, MultishotOp>,
    next_op_gen: u32,
    /// Reads waiting in the ready queue, still in their provided buffers (see `take_read`).
    reads: Vec<Option<Vec<(u16, usize)>>>,
    free_reads: Vec<usize>,
    /// Reads held back for one iteration while more of their data arrives (see `HOLD_MIN`);
    /// the next `dispatch_ops` continues gathering into them, and the loop does not sleep.
    held: Vec<OpCall>,
}

struct Io {
    reactor: Option<Reactor>,
    events: Vec<Event>,
    ops: Vec<OpCompletion>,
}

/// Totals over every timed slice, for the watch's metrics (`ringloop_watch_slice_duration_seconds`).
#[derive(Default)]
struct SliceStats {
    count: u64,
    total_ns: u64,
    max_ns: u64,
    /// Cumulative: `hist[i]` counts slices longer than `bounds[i]` (ascending bounds).
    bounds: Vec<u64>,
    hist: Vec<u64>,
}

impl SliceStats {
    #[inline]
    fn record(&mut self, dt: u64) {
        self.count += 1;
        self.total_ns += dt;
        self.max_ns = self.max_ns.max(dt);
        for (b, h) in self.bounds.iter().zip(self.hist.iter_mut()) {
            if dt <= *b {
                break;
            }
            *h += 1;
        }
    }
}

/// What the watch (`ringloop.watch`) and the watchdog read about the slice running now.
/// Shared with threads that never take the GIL, hence atomics.
#[derive(Default)]
pub struct SliceClock {
    pub seq: AtomicU64,
    /// Start of the running slice in CLOCK_MONOTONIC ns; 0 between slices.
    pub start_ns: AtomicU64,
}

#[pyclass(module = "ringloop._core", frozen, subclass, weakref)]
pub struct LoopCore {
    st: GilCell<State>,
    io: GilCell<Io>,
    waker: Arc<Waker>,
    backend: &'static str,
    fallback_reason: Option<String>,
    closed: AtomicBool,
    stopping: AtomicBool,
    debug: AtomicBool,
    /// The loop is (about to be) blocked in the reactor: threadsafe calls must wake it.
    needs_wake: AtomicBool,
    slow_callback_ns: AtomicU64,
    /// Time every slice (debug mode or the watch is on).
    timing: AtomicBool,
    watch_threshold_ns: AtomicU64,
    watch_hook: GilCell<Option<Py<PyAny>>>,
    /// I/O audit events raised inside timed slices: 0 off, 1 buffered (handed over only for
    /// slow slices), 2 eager (strict mode: every event straight to the sink).
    watch_audit: std::sync::atomic::AtomicU8,
    /// Audit events of the last slow slice, for `_slice_audit_events`.
    slow_audit: GilCell<Vec<Recorded>>,
    sampler: GilCell<Option<Sampler>>,
    stats: GilCell<SliceStats>,
    /// The loop thread's PyThreadState while `run_forever` runs (for the native sampler).
    tstate: ThreadStateCell,
    pub(crate) slice: Arc<SliceClock>,
    /// Counts `_run_once` calls: a stream transport sends directly at most once per iteration
    /// and coalesces its later writes (see `transport::stream`).
    iteration: AtomicU64,
    /// Stream transports with coalesced writes to send once this iteration's callbacks ran.
    flush: GilCell<Vec<Py<StreamIO>>>,
    /// `flush` is not empty: one plain load per iteration instead of a borrow.
    flush_pending: AtomicBool,
}

fn seconds_to_ns(s: f64) -> u64 {
    // NaN and negative deadlines are due at once, as in asyncio; +inf (and anything past the
    // u64 range) is never due. ceil(): a deadline is never rounded towards "earlier".
    if s.is_nan() || s <= 0.0 {
        0
    } else if s >= u64::MAX as f64 / 1e9 {
        u64::MAX
    } else {
        (s * 1e9).ceil() as u64
    }
}

/// asyncio's Handle runs a callback scheduled without `context=` in a *copy* of the context
/// current when it was scheduled, so later changes by the scheduler do not leak into it.
/// (CPython's Task and Future always pass their context, so this copy is off the hot path.)
fn context_or_copy(py: Python<'_>, context: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match context {
        Some(c) if !c.is_none() => Ok(Some(c.unbind())),
        _ => {
            // SAFETY: called with the GIL held; returns a new reference or NULL with an error.
            let p = unsafe { pyo3::ffi::PyContext_CopyCurrent() };
            if p.is_null() {
                return Err(PyErr::fetch(py));
            }
            // SAFETY: `p` is a new, owned reference.
            Ok(Some(unsafe { Bound::from_owned_ptr(py, p) }.unbind()))
        }
    }
}

/// Debug mode: where the handle was created, as asyncio records it (`Handle._source_traceback`,
/// shown by the exception handler). Called from Rust, `sys._getframe(0)` is already the Python
/// frame that called `call_soon`/`call_later`, so no frame needs trimming.
fn source_traceback(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let frame = py.import("sys")?.call_method1("_getframe", (0,))?;
    Ok(py.import("asyncio.format_helpers")?.call_method1("extract_stack", (frame,))?.unbind())
}

/// The deadline of `call_later(delay)`: `now + delay` in ns, never rounded earlier. Negative
/// delays stay ordered by their `when` (asyncio fires `call_later(-2)` before `call_later(-1)`);
/// NaN is due at once.
fn deadline_after(now: u64, delay: f64) -> u64 {
    if delay.is_nan() {
        0
    } else if delay >= 0.0 {
        now.saturating_add(seconds_to_ns(delay))
    } else {
        now.saturating_sub(seconds_to_ns(-delay))
    }
}

static FUTURE_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TASK_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `asyncio.Future` and `asyncio.Task` (CPython's C types), looked up once.
fn future_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    FUTURE_TYPE.get_or_try_init(py, || Ok(py.import("asyncio")?.getattr("Future")?.unbind())).map(|t| t.bind(py))
}

fn task_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    TASK_TYPE.get_or_try_init(py, || Ok(py.import("asyncio")?.getattr("Task")?.unbind())).map(|t| t.bind(py))
}

fn closed_error() -> PyErr {
    PyRuntimeError::new_err("Event loop is closed")
}

/// asyncio's `selectors._fileobj_to_fd`: an int, or an object with `fileno()`.
fn fileobj_to_fd(obj: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    let fd: i64 = if obj.is_instance_of::<PyInt>() {
        obj.extract()?
    } else {
        match obj.call_method0("fileno") {
            Ok(v) => v.extract().map_err(|_| PyValueError::new_err(format!("Invalid file object: {}", obj.repr().map(|r| r.to_string()).unwrap_or_default())))?,
            Err(_) => {
                return Err(PyValueError::new_err(format!(
                    "Invalid file object: {}",
                    obj.repr().map(|r| r.to_string()).unwrap_or_default()
                )))
            }
        }
    };
    if fd < 0 || fd > i32::MAX as i64 {
        return Err(PyValueError::new_err(format!("Invalid file descriptor: {fd}")));
    }
    Ok(fd as RawFd)
}

impl LoopCore {
    /// `call_soon`; the Python-visible entry point is the raw fastcall wrapper in `fastcall.rs`.
    pub(crate) fn call_soon_impl(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: Args,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        this.check_open()?;
        if this.debug.load(Ordering::Relaxed) {
            slf.call_method0("_check_thread")?;
        }
        Self::check_callback(slf, callback, "call_soon")?;
        let h = Self::new_handle(slf, callback, args, context)?;
        let py = slf.py();
        this.st.borrow_mut(py)?.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
        Ok(h)
    }

    /// Tell the reactor what `fd` is now watched for (nothing to do once the loop is closed).
    fn set_interest(&self, py: Python<'_>, fd: RawFd, readable: bool, writable: bool) -> PyResult<std::io::Result<()>> {
        let mut io = self.io.borrow_mut(py)?;
        Ok(match io.reactor.as_mut() {
            Some(r) => r.set_interest(fd, readable, writable),
            None => Ok(()),
        })
    }

        pub(crate) fn timer_cancelled(&self, py: Python<'_>) -> PyResult<()> {
        self.st.borrow_mut(py)?.timers.note_cancelled();
        Ok(())
    }

    #[inline]
    fn check_open(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Relaxed) {
            Err(closed_error())
        } else {
            Ok(())
        }
    }

    fn check_callback(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>, method: &str) -> PyResult<()> {
        if slf.get().debug.load(Ordering::Relaxed) {
            // asyncio's exact messages for coroutines and non-callables.
            slf.call_method1("_check_callback", (callback, method))?;
        } else if !callback.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "a callable object was expected by {method}(), got {}",
                callback.repr()?
            )));
        }
        Ok(())
    }

    fn new_handle(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: Args,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let py = slf.py();
        let context = context_or_copy(py, context)?;
        let mut core = HandleCore::new(callback.clone().unbind(), args, context, slf.clone().into_any().unbind(), None);
        if slf.get().debug.load(Ordering::Relaxed) {
            core.source_tb = Some(source_traceback(py)?);
        }
        Py::new(py, Handle { core })
    }

    fn schedule_at(
        slf: &Bound<'_, Self>,
        when: f64,
        when_ns: u64,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        let py = slf.py();
        let context = context_or_copy(py, context)?;
        let timer = TimerInfo { when_ns, when, scheduled: AtomicBool::new(true) };
        let mut core = HandleCore::new(callback.clone().unbind(), Args::from_tuple(args), context, slf.clone().into_any().unbind(), Some(timer));
        if slf.get().debug.load(Ordering::Relaxed) {
            core.source_tb = Some(source_traceback(py)?);
        }
        let th = Py::new(py, TimerHandle { core })?;
        slf.get().st.borrow_mut(py)?.timers.push(when_ns, th.clone_ref(py));
        Ok(th)
    }

    fn set_fd_callback(
        slf: &Bound<'_, Self>,
        fd: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        writer: bool,
    ) -> PyResult<()> {
        slf.get().check_open()?;
        let fileobj = fd;
        let fd = fileobj_to_fd(fileobj)?;
        Self::check_callback(slf, callback, if writer { "add_writer" } else { "add_reader" })?;
        let handle = Self::new_handle(slf, callback, Args::from_tuple(args), None)?;
        let fileobj = (!fileobj.is_instance_of::<PyInt>()).then(|| fileobj.clone().unbind());
        Self::forget_stale(slf, fd, fileobj.as_ref())?;
        Self::install_fd_handle(slf, fd, handle, writer, fileobj)
    }

    /// `add_writer`/`add_reader` for native transports: no argument checks (the callback is a
    /// bound method of ours).
    pub(crate) fn set_fd_callback_raw(slf: &Bound<'_, Self>, fd: RawFd, callback: &Bound<'_, PyAny>, writer: bool) -> PyResult<()> {
        slf.get().check_open()?;
        let handle = Self::new_handle(slf, callback, Args::None, None)?;
        Self::install_fd_handle(slf, fd, handle, writer, None)
    }

    pub(crate) fn remove_fd_callback_raw(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        Self::remove_fd_handle(slf, fd, writer)
    }

    /// Queue a stream transport's coalesced writes for the end of this iteration.
    pub(crate) fn queue_flush(slf: &Bound<'_, Self>, io: Py<StreamIO>) -> PyResult<()> {
        slf.get().flush.borrow_mut(slf.py())?.push(io);
        slf.get().flush_pending.store(true, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    pub(crate) fn iteration(&self) -> u64 {
        self.iteration.load(Ordering::Relaxed)
    }

    /// Start a transport reading `fd`: with a multishot operation of `kind` (`Recv` for a
    /// stream, `RecvMsg` for UDP) whose completions go to `on_op`, or, where this loop has none
    /// (epoll, no provided-buffer rings), with `owner._on_readable` as the fd's reader. Returns
    /// the operation's token; `None` means reading on readiness. `read_stop` undoes it.
    pub(crate) fn read_start(slf: &Bound<'_, Self>, fd: RawFd, kind: OpKind, on_op: Py<PyAny>, owner: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let token = Self::op_start(slf, fd, kind, on_op)?;
        if token.is_none() {
            let on_readable = owner.getattr(intern!(slf.py(), "_on_readable"))?;
            Self::set_fd_callback_raw(slf, fd, &on_readable, false)?;
        }
        Ok(token)
    }

    /// Stop what `read_start` started: cancel the operation `token` (processed before this
    /// returns, so the fd may be closed right after), or remove the fd's reader.
    pub(crate) fn read_stop(slf: &Bound<'_, Self>, fd: RawFd, token: Option<u64>) -> PyResult<()> {
        match token {
            Some(t) => Self::op_stop(slf, t),
            None => Self::remove_fd_callback_raw(slf, fd, false).map(|_| ()),
        }
    }

    /// Stop the operation `token` like `read_stop`, and queue `then(None)` behind its last
    /// completion, after every read it still delivers. `false`: no such operation running
    /// (nothing will be queued; the caller goes on at once).
    pub(crate) fn read_stop_then(slf: &Bound<'_, Self>, token: u64, then: Py<PyAny>) -> PyResult<bool> {
        {
            let mut st = slf.get().st.borrow_mut(slf.py())?;
            match st.multishots.get_mut(&token) {
                Some(r) if !r.stopping => r.then = Some(then),
                _ => return Ok(false),
            }
        }
        Self::op_stop(slf, token)?;
        Ok(true)
    }

    /// Datagram `n` (as the recvmsg callback received it): its payload as `bytes` and the
    /// sender's address, and whether the kernel truncated it. Its buffer goes back at once.
    /// `None`: already taken, or the loop closed.
    pub(crate) fn take_datagram(slf: &Bound<'_, Self>, n: i64) -> PyResult<Option<(Py<PyBytes>, libc::sockaddr_storage, bool)>> {
        let py = slf.py();
        let this = slf.get();
        let Some(read) = Self::take_read(slf, n)? else { return Ok(None) };
        let mut io = this.io.borrow_mut(py)?;
        let Some(u) = io.reactor.as_mut().and_then(|r| r.uring()) else { return Ok(None) };
        let &[(bid, len)] = read.chunks.as_slice() else { unreachable!("a datagram is one buffer") };
        let got = u.recvmsg_parts(bid, len).map(|(name, payload, truncated)| {
            // SAFETY: sockaddr_storage is plain data; all-zero is valid (family AF_UNSPEC).
            let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let n = name.len().min(std::mem::size_of::<libc::sockaddr_storage>());
            // SAFETY: both regions are at least `n` bytes and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), (&mut sa as *mut libc::sockaddr_storage).cast::<u8>(), n) };
            (PyBytes::new(py, payload).unbind(), sa, truncated)
        });
        // `read`'s Drop hands the buffer back, once the ring is no longer borrowed.
        drop(io);
        drop(read);
        Ok(got)
    }

    /// Arm a multishot operation of `kind` on `fd` whose completions go to `callback` (in a
    /// copy of the current context). `None` when this loop has no io_uring with provided
    /// buffers; multishot accept (5.19) predates multishot recv (6.0), so one probe answers
    /// for both.
    fn op_start(slf: &Bound<'_, Self>, fd: RawFd, kind: OpKind, callback: Py<PyAny>) -> PyResult<Option<u64>> {
        let py = slf.py();
        let this = slf.get();
        this.check_open()?;
        let context = context_or_copy(py, None)?.expect("a copy is always made");
        let token = {
            let mut st = this.st.borrow_mut(py)?;
            st.next_op_gen = st.next_op_gen.wrapping_add(1);
            op_token(fd, st.next_op_gen)
        };
        let started = {
            let mut io = this.io.borrow_mut(py)?;
            match io.reactor.as_mut().and_then(|r| r.uring()).map(|u| (u.recv_multishot_available(), u)) {
                Some((true, u)) => {
                    match kind {
                        OpKind::Recv => u.recv_multishot(fd, token),
                        OpKind::Accept => u.accept_multishot(fd, token),
                        OpKind::RecvMsg => u.recvmsg_multishot(fd, token),
                    }
                    .map_err(os_error)?;
                    true
                }
                _ => false,
            }
        };
        if !started {
            drop((callback, context));
            return Ok(None);
        }
        this.st.borrow_mut(py)?.multishots.insert(token, MultishotOp { kind, callback, context, stopping: false, then: None });
        Ok(Some(token))
    }

    /// Pending read `n` (as `_on_recv` received it), taken from its slot: its provided buffers
    /// are the caller's until copied out or dropped. `None`: already taken.
    ///
    /// Reads are copied when their callback runs, not when the batch is reaped: materialising
    /// a whole batch first (64 connections x 100 KiB) put megabytes of short-lived `bytes` on
    /// the heap at once, and glibc returned them to the kernel and faulted them back in every
    /// iteration (100 KiB echo spent more CPU in brk and page faults than in TCP). One read at
    /// a time reuses the same heap memory, as a `recv` into a fresh buffer does.
    pub(crate) fn take_read(slf: &Bound<'_, Self>, n: i64) -> PyResult<Option<PendingRead>> {
        let py = slf.py();
        let mut st = slf.get().st.borrow_mut(py)?;
        let idx = (n - 1) as usize;
        Ok(st.reads.get_mut(idx).and_then(|c| c.take()).map(|chunks| {
            st.free_reads.push(idx);
            let left = chunks.iter().map(|c| c.1).sum();
            PendingRead { loop_: slf.clone().unbind(), chunks, next: 0, off: 0, left }
        }))
    }

    /// Stop a multishot operation; the cancellation is processed before this returns, so the
    /// fd may be closed right after.
    fn op_stop(slf: &Bound<'_, Self>, token: u64) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            match st.multishots.get_mut(&token) {
                Some(r) if !r.stopping => r.stopping = true,
                _ => return Ok(()),
            }
        }
        let mut io = this.io.borrow_mut(py)?;
        if let Some(u) = io.reactor.as_mut().and_then(|r| r.uring()) {
            u.cancel_op(token).map_err(os_error)?;
        }
        Ok(())
    }

    /// Turn this iteration's operation completions into callbacks. Reads stay in their
    /// provided buffers until the callback runs (`take_read`); buffers nobody will read go
    /// back to the kernel here. A multishot that ended for want of buffers (or any reason but
    /// EOF, an error or a cancel) is re-armed here, so the user never sees ENOBUFS.
    ///
    /// Like asyncio's one `recv` per ready fd per iteration, a stream gets one read per batch:
    /// its data completions are gathered (up to `MAX_GATHER`) into one pending read, copied
    /// into one `bytes` when its callback runs (`take_read`), and an EOF
    /// or error that follows data of the same stream is returned in `later`, for the caller
    /// to queue behind this iteration's callbacks. Programs observe that order:
    /// `run_until_complete` of a TLS connect must return before the peer's EOF is processed.
    /// (A first version joined pairwise, re-copying everything so far per completion: 100 KiB
    /// echo cost 9x epoll's CPU.)
    fn dispatch_ops(slf: &Bound<'_, Self>) -> PyResult<Vec<Py<Handle>>> {
        let py = slf.py();
        let this = slf.get();
        let mut calls: Vec<OpCall> = std::mem::take(&mut this.st.borrow_mut(py)?.held);
        let mut gone: Vec<MultishotOp> = Vec::new();
        {
            let mut io_ref = this.io.borrow_mut(py)?;
            let io = &mut *io_ref;
            let Some(u) = io.reactor.as_mut().and_then(|r| r.uring()) else {
                io.ops.clear();
                return Ok(Vec::new());
            };
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            // Buffers of completions nobody reads (stale or cancelled operations).
            let mut unread: Vec<u16> = Vec::new();
            for op in io.ops.drain(..) {
                let earlier = calls.iter().rposition(|c| c.token == op.token);
                let Some(rs) = st.multishots.get(&op.token) else {
                    unread.extend(op.bid);
                    continue;
                };
                let call = |item: Py<PyAny>, later: bool| OpCall {
                    token: op.token,
                    callback: rs.callback.clone_ref(py),
                    item,
                    context: rs.context.clone_ref(py),
                    later,
                    gathering: None,
                    held: false,
                };
                let rearm = match (rs.kind, op.res, op.bid) {
                    (OpKind::Accept, res, _) => {
                        if res != -libc::ECANCELED {
                            calls.push(call(res.into_pyobject(py)?.into_any().unbind(), false));
                        }
                        res >= 0
                    }
                    (OpKind::RecvMsg, n, Some(bid)) if n > 0 => {
                        // One datagram per completion: never gathered, each its own item.
                        let slot = new_read(&mut st.reads, &mut st.free_reads, vec![(bid, n as usize)]);
                        calls.push(call((slot as i64 + 1).into_pyobject(py)?.into_any().unbind(), false));
                        true
                    }
                    (OpKind::RecvMsg, n, bid) => {
                        unread.extend(bid);
                        // An error goes to error_received and reading goes on (asyncio keeps its
                        // reader); a multishot ended by an error is re-armed like one ended by
                        // ENOBUFS. 0 means the socket was shut down: nothing more will come.
                        if n < 0 && n != -libc::ENOBUFS && n != -libc::ECANCELED {
                            calls.push(call(n.into_pyobject(py)?.into_any().unbind(), false));
                        }
                        n < 0 && n != -libc::ECANCELED
                    }
                    (OpKind::Recv, n, Some(bid)) if n > 0 => {
                        // Data: gathered per stream into one pending read (what one large
                        // recv would have returned), copied when its callback runs.
                        let n = n as usize;
                        let open = earlier.and_then(|i| calls[i].gathering.map(|g| (i, g))).filter(|(_, (_, size))| size + n <= MAX_GATHER);
                        match open {
                            Some((i, (slot, size))) => {
                                st.reads[slot].as_mut().expect("gathering").push((bid, n));
                                calls[i].gathering = Some((slot, size + n));
                            }
                            None => {
                                let slot = new_read(&mut st.reads, &mut st.free_reads, vec![(bid, n)]);
                                // Positive: a pending read (EOF is 0, errors are negative).
                                let mut c = call((slot as i64 + 1).into_pyobject(py)?.into_any().unbind(), false);
                                c.gathering = Some((slot, n));
                                calls.push(c);
                            }
                        }
                        true
                    }
                    (OpKind::Recv, n, bid) => {
                        unread.extend(bid);
                        if n == 0 || (n < 0 && n != -libc::ENOBUFS && n != -libc::ECANCELED) {
                            calls.push(call(n.into_pyobject(py)?.into_any().unbind(), earlier.is_some()));
                        }
                        n == -libc::ENOBUFS
                    }
                };
                if !op.more {
                    if rearm && !rs.stopping {
                        let (fd, _) = op_token_parts(op.token);
                        match rs.kind {
                            OpKind::Recv => u.recv_multishot(fd, op.token),
                            OpKind::Accept => u.accept_multishot(fd, op.token),
                            OpKind::RecvMsg => u.recvmsg_multishot(fd, op.token),
                        }
                        .map_err(os_error)?;
                    } else if let Some(mut rs) = st.multishots.remove(&op.token) {
                        if let Some(then) = rs.then.take() {
                            // Behind an EOF or error of this operation queued for later, too.
                            let later = calls.iter().any(|c| c.token == op.token && c.later);
                            calls.push(OpCall {
                                token: op.token,
                                callback: then,
                                item: py.None(),
                                context: rs.context.clone_ref(py),
                                later,
                                gathering: None,
                                held: false,
                            });
                        }
                        gone.push(rs);
                    }
                }
            }
            for bid in unread {
                u.recycle(bid);
            }
            u.publish_buffers();
            // Hold large reads whose socket already has more (see `HOLD_MIN`). Only a read
            // with nothing queued behind it: an EOF or error after it keeps the order.
            let mut i = 0;
            while i < calls.len() {
                let c = &calls[i];
                let hold = match c.gathering {
                    Some((_, size)) if !c.held && (HOLD_MIN..MAX_GATHER).contains(&size) => {
                        !calls[i + 1..].iter().any(|n| n.token == c.token)
                            && st.multishots.get(&c.token).is_some_and(|m| !m.stopping)
                            && bytes_waiting(op_token_parts(c.token).0) > 0
                    }
                    _ => false,
                };
                if hold {
                    let mut c = calls.remove(i);
                    c.held = true;
                    st.held.push(c);
                } else {
                    i += 1;
                }
            }
        }
        drop(gone);
        let mut now = Vec::with_capacity(calls.len());
        let mut later = Vec::new();
        for c in calls {
            let core = HandleCore::new(c.callback, Args::One(c.item), Some(c.context), slf.clone().into_any().unbind(), None);
            let h = Py::new(py, Handle { core })?;
            if c.later {
                later.push(h);
            } else {
                now.push(h);
            }
        }
        if !now.is_empty() {
            this.st.borrow_mut(py)?.ready.extend(now.into_iter().map(AnyHandle::Plain));
        }
        Ok(later)
    }

    /// A registration of `fd` made through a file object that is now closed (its `fileno()`
    /// is -1) belongs to a file that is gone: the fd number was closed and reused without
    /// `remove_reader`/`remove_writer`. Its callbacks are dropped before `fileobj` registers
    /// the same number, so a callback of the closed file can never run for the new one.
    fn forget_stale(slf: &Bound<'_, Self>, fd: RawFd, fileobj: Option<&Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let old = {
            let st = this.st.borrow(py)?;
            match st.fds.get(&fd).and_then(|e| e.fileobj.as_ref()) {
                Some(old) if fileobj.is_none_or(|f| !f.is(old)) => old.clone_ref(py),
                _ => return Ok(()),
            }
        };
        if fileobj_to_fd(old.bind(py)).is_ok_and(|n| n == fd) {
            return Ok(()); // the same file, open, named through another object
        }
        let dropped = this.st.borrow_mut(py)?.fds.remove(&fd);
        if let Some(e) = dropped {
            for h in [e.reader, e.writer].into_iter().flatten() {
                let cancelled = h.get().core.take_cancel(py)?;
                drop(cancelled);
            }
        }
        // The closed file may still be watched (io_uring's poll holds a reference to it).
        drop(this.set_interest(py, fd, false, false)?);
        Ok(())
    }

    fn install_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, handle: Py<Handle>, writer: bool, fileobj: Option<Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (old, old_fileobj, want_r, want_w) = {
            let mut st = this.st.borrow_mut(py)?;
            let e = st.fds.entry(fd).or_default();
            let slot = if writer { &mut e.writer } else { &mut e.reader };
            let old = slot.replace(handle);
            // A registration through a plain int keeps the object named before (same fd).
            let old_fileobj = fileobj.map(|f| e.fileobj.replace(f));
            (old, old_fileobj, e.reader.is_some(), e.writer.is_some())
        };
        let res = this.set_interest(py, fd, want_r, want_w)?;
        if let Err(e) = res {
            // Undo: the fd keeps whatever it had before.
            let undone = {
                let mut st = this.st.borrow_mut(py)?;
                let e = st.fds.entry(fd).or_default();
                let slot = if writer { &mut e.writer } else { &mut e.reader };
                let new = slot.take();
                let restore = old.as_ref().map(|h| h.clone_ref(py));
                *slot = restore;
                let new_fileobj = old_fileobj.map(|f| std::mem::replace(&mut e.fileobj, f));
                if e.reader.is_none() && e.writer.is_none() {
                    st.fds.remove(&fd);
                }
                (new, new_fileobj)
            };
            drop(undone);
            return Err(os_error(e));
        }
        drop(old_fileobj);
        if let Some(old) = old {
            // asyncio cancels the handle a new callback replaces.
            let dropped = old.get().core.take_cancel(py)?;
            drop(dropped);
        }
        Ok(())
    }

    /// `remove_reader`/`remove_writer(fileobj)`. Like asyncio's selector, a file object that
    /// was closed since it was registered (`fileno()` is -1) is still found, by identity.
    fn remove_fd_callback(slf: &Bound<'_, Self>, fileobj: &Bound<'_, PyAny>, writer: bool) -> PyResult<bool> {
        match fileobj_to_fd(fileobj) {
            Ok(fd) => Self::remove_fd_handle(slf, fd, writer),
            Err(e) => {
                let found = {
                    let st = slf.get().st.borrow(slf.py())?;
                    st.fds.iter().find(|(_, c)| c.fileobj.as_ref().is_some_and(|f| f.is(fileobj))).map(|(fd, _)| *fd)
                };
                let Some(fd) = found else { return Err(e) };
                Self::remove_closed_fd_handle(slf, fd, writer)
            }
        }
    }

    /// Remove a callback of `fd` whose file is closed: the reactor forgets the fd (there is
    /// nothing left to watch, and epoll would refuse a change with EBADF); the other callback,
    /// if any, stays registered so its own remove call still finds it.
    fn remove_closed_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if this.closed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let old = {
            let mut st = this.st.borrow_mut(py)?;
            let Some(e) = st.fds.get_mut(&fd) else { return Ok(false) };
            let old = if writer { e.writer.take() } else { e.reader.take() };
            if e.reader.is_none() && e.writer.is_none() {
                st.fds.remove(&fd);
            }
            old
        };
        let Some(old) = old else { return Ok(false) };
        drop(this.set_interest(py, fd, false, false)?);
        let dropped = old.get().core.take_cancel(py)?;
        drop(dropped);
        drop(old);
        Ok(true)
    }

    fn remove_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if this.closed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let (old, want_r, want_w) = {
            let mut st = this.st.borrow_mut(py)?;
            let Some(e) = st.fds.get_mut(&fd) else { return Ok(false) };
            let old = if writer { e.writer.take() } else { e.reader.take() };
            let (r, w) = (e.reader.is_some(), e.writer.is_some());
            if !r && !w {
                st.fds.remove(&fd);
            }
            (old, r, w)
        };
        let Some(old) = old else { return Ok(false) };
        let res = this.set_interest(py, fd, want_r, want_w)?;
        let dropped = old.get().core.take_cancel(py)?;
        drop(dropped);
        drop(old);
        res.map_err(os_error)?;
        Ok(true)
    }

    /// One loop iteration (see the module docs for the order).
    fn run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        // Only this thread writes it (under the GIL): a plain load and store, no locked add.
        this.iteration.store(this.iteration.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);

        // Discard cancelled timers before deciding how long to sleep; drop them only after the
        // borrow ends (their callbacks' __del__ may schedule more work).
        let dead = {
            let mut st = this.st.borrow_mut(py)?;
            let mut dead = st.timers.sweep(|h| h.get().core.is_cancelled());
            while st.timers.peek().is_some_and(|h| h.get().core.is_cancelled()) {
                let h = st.timers.pop().expect("peeked");
                st.timers.note_removed_cancelled();
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

        // From the emptiness check to the wait no Python code runs and we hold the GIL, so no
        // other thread can queue a callback in between; once the GIL is released for the wait,
        // `needs_wake` tells `call_soon_threadsafe` to wake the reactor.
        let timeout = {
            let st = this.st.borrow(py)?;
            if !st.ready.is_empty() || !st.held.is_empty() || this.stopping.load(Ordering::Relaxed) {
                Some(Duration::ZERO)
            } else {
                this.needs_wake.store(true, Ordering::SeqCst);
                st.timers.peek_when().map(|w| Duration::from_nanos(w.saturating_sub(monotonic_ns())).min(MAX_WAIT))
            }
        };
        let events = {
            let mut io_ref = this.io.borrow_mut(py)?;
            let io = &mut *io_ref;
            let mut events = std::mem::take(&mut io.events);
            events.clear();
            let ops = &mut io.ops;
            let reactor = io.reactor.as_mut().ok_or_else(closed_error)?;
            let res = if timeout == Some(Duration::ZERO) {
                reactor.poll(timeout, &mut events, ops)
            } else {
                let r = py.detach(|| reactor.poll(timeout, &mut events, ops));
                this.needs_wake.store(false, Ordering::SeqCst);
                r
            };
            res.map_err(os_error)?;
            (events, !io.ops.is_empty())
        };
        let (mut events, has_ops) = events;
        // I/O first, then timers, as asyncio orders them.
        let later = if has_ops || !this.st.borrow(py)?.held.is_empty() { Self::dispatch_ops(slf)? } else { Vec::new() };

        {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            for ev in &events {
                if let Some(cbs) = st.fds.get(&ev.fd) {
                    if ev.readable {
                        if let Some(h) = &cbs.reader {
                            st.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
                        }
                    }
                    if ev.writable {
                        if let Some(h) = &cbs.writer {
                            st.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
                        }
                    }
                }
            }
            if !st.timers.is_empty() {
                let now = monotonic_ns();
                while let Some(h) = st.timers.pop_expired(now) {
                    if let Some(t) = &h.get().core.timer {
                        t.scheduled.store(false, Ordering::Relaxed);
                    }
                    // A cancelled one would only be skipped below; it is dropped there,
                    // outside this borrow.
                    st.ready.push_back(AnyHandle::Timer(h));
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

        let ntodo = if later.is_empty() {
            this.st.borrow(py)?.ready.len()
        } else {
            let mut st = this.st.borrow_mut(py)?;
            let n = st.ready.len();
            st.ready.extend(later.into_iter().map(AnyHandle::Plain));
            n
        };
        let timing = this.timing.load(Ordering::Relaxed);
        for _ in 0..ntodo {
            let Some(h) = this.st.borrow_mut(py)?.ready.pop_front() else { break };
            if h.core().is_cancelled() {
                continue;
            }
            if !timing {
                h.run(py)?;
            } else {
                Self::run_timed(slf, &h)?;
            }
        }
        Self::flush_streams(slf)
    }

    /// Send the writes stream transports coalesced during this iteration (one `sendmsg` each).
    fn flush_streams(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if !this.flush_pending.load(Ordering::Relaxed) {
            return Ok(());
        }
        this.flush_pending.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *this.flush.borrow_mut(py)?);
        let mut it = list.into_iter();
        while let Some(io) = it.next() {
            let Err(e) = StreamIO::flush(io.bind(py)) else { continue };
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                // Leaving run_forever: the others still flush at the next iteration.
                this.flush.borrow_mut(py)?.extend(it);
                this.flush_pending.store(true, Ordering::Relaxed);
                return Err(e);
            }
            // What asyncio does with an exception from a writer callback.
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
        let t0 = monotonic_ns();
        this.slice.seq.fetch_add(1, Ordering::Relaxed);
        this.slice.start_ns.store(t0, Ordering::Release);
        let audit = this.watch_audit.load(Ordering::Relaxed);
        if audit != 0 {
            set_eager(audit == 2);
            set_in_slice(true);
        }
        let r = h.run(py);
        let dt = monotonic_ns().saturating_sub(t0);
        let wt = this.watch_threshold_ns.load(Ordering::Relaxed);
        let slow = wt != 0 && dt >= wt;
        let events = if audit != 0 {
            set_in_slice(false);
            end_slice(slow)
        } else {
            Vec::new()
        };
        this.slice.start_ns.store(0, Ordering::Release);
        if let Ok(mut st) = this.stats.borrow_mut(py) {
            st.record(dt);
        }
        r?;
        if this.debug.load(Ordering::Relaxed) && dt >= this.slow_callback_ns.load(Ordering::Relaxed) {
            slf.call_method1("_log_slow_callback", (h.as_any(), dt as f64 / 1e9))?;
        }
        if !events.is_empty() {
            // Only a slow slice's events are read; a short slice's were dropped unread.
            let old = std::mem::replace(&mut *this.slow_audit.borrow_mut(py)?, events);
            drop(old);
        }
        if slow {
            let hook = this.watch_hook.borrow(py)?.as_ref().map(|h| h.clone_ref(py));
            if let Some(hook) = hook {
                if let Err(e) = hook.call1(py, (h.as_any(), t0, dt)) {
                    // A broken hook must not break the program it watches.
                    e.write_unraisable(py, Some(hook.bind(py)));
                }
            }
        }
        Ok(())
    }

    fn update_timing(&self) {
        let on = self.debug.load(Ordering::Relaxed) || self.watch_threshold_ns.load(Ordering::Relaxed) != 0;
        self.timing.store(on, Ordering::Relaxed);
    }
}

#[pymethods]
impl LoopCore {
    #[new]
    #[pyo3(signature = (*_args, backend = None, thread_bound = false, **_kwargs))]
    fn py_new(
        _args: &Bound<'_, PyTuple>,
        backend: Option<&str>,
        thread_bound: bool,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
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
            st: GilCell::new(State::default()),
            waker: reactor.waker().clone(),
            backend: reactor.name(),
            io: GilCell::new(Io { reactor: Some(reactor), events: Vec::with_capacity(256), ops: Vec::with_capacity(256) }),
            fallback_reason,
            closed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            debug: AtomicBool::new(false),
            needs_wake: AtomicBool::new(false),
            slow_callback_ns: AtomicU64::new(100_000_000),
            timing: AtomicBool::new(false),
            watch_threshold_ns: AtomicU64::new(0),
            watch_hook: GilCell::new(None),
            watch_audit: std::sync::atomic::AtomicU8::new(0),
            slow_audit: GilCell::new(Vec::new()),
            sampler: GilCell::new(None),
            stats: GilCell::new(SliceStats::default()),
            tstate: Arc::default(),
            slice: Arc::new(SliceClock::default()),
            iteration: AtomicU64::new(0),
            flush: GilCell::new(Vec::new()),
            flush_pending: AtomicBool::new(false),
        })
    }

    /// `"io_uring"` or `"epoll"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// Why `auto` fell back to epoll, or `None`.
    #[getter]
    fn backend_fallback_reason(&self) -> Option<String> {
        self.fallback_reason.clone()
    }

    #[getter]
    fn _closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
    #[setter(_closed)]
    fn set_closed_attr(&self, v: bool) {
        self.closed.store(v, Ordering::Relaxed);
    }

    #[getter]
    fn _stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
    #[setter(_stopping)]
    fn set_stopping_attr(&self, v: bool) {
        self.stopping.store(v, Ordering::Relaxed);
    }

    #[getter]
    fn _debug(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }
    #[setter(_debug)]
    fn set_debug_attr(&self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.debug.store(v.is_truthy()?, Ordering::Relaxed);
        self.update_timing();
        Ok(())
    }

    #[getter]
    fn slow_callback_duration(&self) -> f64 {
        self.slow_callback_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
    #[setter]
    fn set_slow_callback_duration(&self, v: f64) {
        self.slow_callback_ns.store(seconds_to_ns(v), Ordering::Relaxed);
    }

    fn time(&self) -> f64 {
        monotonic_ns() as f64 / 1e9
    }

    /// Nanosecond clock of the loop (CLOCK_MONOTONIC, same as `time.monotonic_ns()`).
    fn time_ns(&self) -> u64 {
        monotonic_ns()
    }

    #[pyo3(signature = (callback, *args, context = None))]
    fn call_soon_threadsafe(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        this.check_open()?;
        Self::check_callback(slf, callback, "call_soon_threadsafe")?;
        let h = Self::new_handle(slf, callback, Args::from_tuple(args), context)?;
        let py = slf.py();
        this.st.borrow_mut(py)?.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
        if this.needs_wake.load(Ordering::SeqCst) {
            this.waker.wake();
        }
        Ok(h)
    }

    #[pyo3(signature = (delay, callback, *args, context = None))]
    fn call_later(
        slf: &Bound<'_, Self>,
        delay: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if delay.is_none() {
            return Err(PyTypeError::new_err("delay must not be None"));
        }
        let this = slf.get();
        this.check_open()?;
        let delay: f64 = delay.extract()?;
        if this.debug.load(Ordering::Relaxed) {
            slf.call_method0("_check_thread")?;
        }
        Self::check_callback(slf, callback, "call_later")?;
        let now = monotonic_ns();
        let when = now as f64 / 1e9 + delay;
        let when_ns = deadline_after(now, delay);
        Self::schedule_at(slf, when, when_ns, callback, args, context)
    }

    #[pyo3(signature = (when, callback, *args, context = None))]
    fn call_at(
        slf: &Bound<'_, Self>,
        when: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if when.is_none() {
            return Err(PyTypeError::new_err("when cannot be None"));
        }
        let this = slf.get();
        this.check_open()?;
        let when: f64 = when.extract()?;
        if this.debug.load(Ordering::Relaxed) {
            slf.call_method0("_check_thread")?;
        }
        Self::check_callback(slf, callback, "call_at")?;
        Self::schedule_at(slf, when, seconds_to_ns(when), callback, args, context)
    }

    /// CPython's C Future and Task call `loop.get_debug()` every time one is created: keep it
    /// native (BaseEventLoop's is a Python method).
    fn get_debug(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }

    /// `asyncio.Future(loop=self)`, without a Python frame.
    fn create_future(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let kw = PyDict::new(py);
        kw.set_item(intern!(py, "loop"), slf)?;
        Ok(future_type(py)?.call((), Some(&kw))?.unbind())
    }

    /// `asyncio.Task(coro, loop=self, name=name, context=context)` when no task factory is set
    /// and debug mode is off (the common case, and a Python frame saved per task); otherwise
    /// asyncio's own `BaseEventLoop.create_task`, which handles factories, debug source
    /// tracebacks and the keywords newer Pythons add.
    #[pyo3(signature = (coro, *, name = None, context = None, **kwargs))]
    fn create_task(
        slf: &Bound<'_, Self>,
        coro: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
        context: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let simple = kwargs.is_none_or(|k| k.is_empty())
            && !this.debug.load(Ordering::Relaxed)
            && slf.getattr(intern!(py, "_task_factory"))?.is_none();
        let kw = PyDict::new(py);
        if let Some(n) = name {
            kw.set_item(intern!(py, "name"), n)?;
        }
        if let Some(c) = context {
            kw.set_item(intern!(py, "context"), c)?;
        }
        if !simple {
            if let Some(k) = kwargs {
                kw.update(k.as_mapping())?;
            }
            let base = py.import(intern!(py, "asyncio.base_events"))?.getattr(intern!(py, "BaseEventLoop"))?;
            return Ok(base.getattr(intern!(py, "create_task"))?.call((slf, coro), Some(&kw))?.unbind());
        }
        this.check_open()?;
        kw.set_item(intern!(py, "loop"), slf)?;
        Ok(task_type(py)?.call((coro,), Some(&kw))?.unbind())
    }

    /// Wake the loop from its wait (asyncio's name for the self-pipe write).
    fn _write_to_self(&self) {
        self.waker.wake();
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    fn _run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run_once(slf)
    }

    /// The body of `run_forever`: iterate until `stop()`. The Python half sets up and tears
    /// down (running-loop registration, async-generator hooks) around it.
    fn _run_forever_native(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        // SAFETY: we hold the GIL, so this thread has a current thread state.
        this.tstate.tstate.store(unsafe { pyo3::ffi::PyThreadState_Get() }, Ordering::Release);
        // SAFETY: pthread_self has no preconditions.
        this.tstate.pthread.store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
        let r = loop {
            if let Err(e) = Self::run_once(slf) {
                break Err(e);
            }
            if this.stopping.load(Ordering::Relaxed) {
                break Ok(());
            }
        };
        this.tstate.pthread.store(0, Ordering::Release);
        this.tstate.tstate.store(std::ptr::null_mut(), Ordering::Release);
        r
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn add_reader(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::set_fd_callback(slf, fd, callback, args, false)
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn add_writer(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::set_fd_callback(slf, fd, callback, args, true)
    }

    fn remove_reader(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_fd_callback(slf, fd, false)
    }

    fn remove_writer(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_fd_callback(slf, fd, true)
    }

    /// io_uring: start a multishot accept on listening socket `fd`; `callback(res)` is called
    /// with each new connection's fd (or `-errno`). Returns the operation's token, or `None`
    /// on epoll (the caller then accepts on readiness).
    fn _accept_start(slf: &Bound<'_, Self>, fd: RawFd, callback: Py<PyAny>) -> PyResult<Option<u64>> {
        Self::op_start(slf, fd, OpKind::Accept, callback)
    }

    /// Stop a multishot accept; processed before this returns, so the socket may be closed.
    fn _accept_stop(slf: &Bound<'_, Self>, token: u64) -> PyResult<()> {
        if slf.get().closed.load(Ordering::Relaxed) {
            return Ok(());
        }
        Self::op_stop(slf, token)
    }

    /// `(reader_handle, writer_handle)` registered for `fd` (either may be None).
    fn _fd_callbacks(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<FdHandles> {
        let py = slf.py();
        let fd = fileobj_to_fd(fd)?;
        let st = slf.get().st.borrow(py)?;
        Ok(match st.fds.get(&fd) {
            Some(e) => (e.reader.as_ref().map(|h| h.clone_ref(py)), e.writer.as_ref().map(|h| h.clone_ref(py))),
            None => (None, None),
        })
    }

    /// Forget every callback and release the reactor. Called by `close()`.
    fn _close_native(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.closed.store(true, Ordering::Relaxed);
        let (ready, timers, fds) = {
            let mut st = this.st.borrow_mut(py)?;
            (std::mem::take(&mut st.ready), st.timers.drain(), std::mem::take(&mut st.fds))
        };
        for h in &timers {
            if let Some(t) = &h.get().core.timer {
                t.scheduled.store(false, Ordering::Relaxed);
            }
        }
        let reactor = this.io.borrow_mut(py)?.reactor.take();
        let hook = this.watch_hook.borrow_mut(py)?.take();
        let sampler = this.sampler.borrow_mut(py)?.take();
        let slow_audit = std::mem::take(&mut *this.slow_audit.borrow_mut(py)?);
        let flush = std::mem::take(&mut *this.flush.borrow_mut(py)?);
        drop((ready, timers, fds, reactor, hook, slow_audit, flush));
        // The reactor is gone, so nothing polls the eventfd: release it now.
        this.waker.close();
        // Joining the watchdog thread: it never takes the GIL, so waiting with it held is safe.
        drop(sampler);
        Ok(())
    }

    /// Counts for tests and `repr`: ready callbacks, scheduled timers, fds watched.
    fn _stats(&self, py: Python<'_>) -> PyResult<(usize, usize, usize)> {
        let st = self.st.borrow(py)?;
        Ok((st.ready.len(), st.timers.len(), st.fds.len()))
    }

    #[getter]
    fn _timer_cancelled_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.st.borrow(py)?.timers.cancelled())
    }
    #[setter(_timer_cancelled_count)]
    fn set_timer_cancelled_count_attr(&self, _v: usize) {
        // Owned by the native heap; accepted (and ignored) so BaseEventLoop.__init__ can run.
    }

    /// Turn the watch's slice timing on (`threshold_ns > 0` and a hook) or off.
    #[pyo3(signature = (threshold_ns, on_slow = None))]
    fn _watch_set(&self, py: Python<'_>, threshold_ns: u64, on_slow: Option<Py<PyAny>>) -> PyResult<()> {
        let on = threshold_ns > 0 && on_slow.is_some();
        let old = std::mem::replace(&mut *self.watch_hook.borrow_mut(py)?, if on { on_slow } else { None });
        self.watch_threshold_ns.store(if on { threshold_ns } else { 0 }, Ordering::Relaxed);
        self.update_timing();
        drop(old);
        Ok(())
    }

    /// Forward I/O audit events raised inside timed slices to the sink given to
    /// `_core.audit_hook_install` (the watch's C-level audit source).
    ///
    /// `mode`: 0 off, 1 buffered (events reach Python only for slow slices, through
    /// `_slice_audit_events`), 2 eager (every event straight to the sink: strict mode).
    fn _watch_audit(&self, mode: u8) -> PyResult<()> {
        if mode > 2 {
            return Err(PyValueError::new_err("audit mode must be 0 (off), 1 (buffered) or 2 (eager)"));
        }
        self.watch_audit.store(mode, Ordering::Relaxed);
        Ok(())
    }

    /// The audit events of the slow slice just reported: `[(event, args, frame, t_ns)]`
    /// (taken: a second call returns `[]`).
    fn _slice_audit_events(&self, py: Python<'_>) -> PyResult<Vec<AuditTuple>> {
        let events = std::mem::take(&mut *self.slow_audit.borrow_mut(py)?);
        Ok(events.into_iter().map(|r| (r.event(), r.args, r.frame, r.t_ns)).collect())
    }

    /// Start the GIL-free stack sampler: slices older than `arm_ns` are sampled every
    /// `interval_ns`. Returns False where this Python cannot be sampled natively.
    fn _watch_sampler_start(&self, py: Python<'_>, arm_ns: u64, interval_ns: u64) -> PyResult<bool> {
        let new = Sampler::start(self.slice.clone(), self.tstate.clone(), arm_ns, interval_ns);
        let ok = new.is_some();
        let old = std::mem::replace(&mut *self.sampler.borrow_mut(py)?, new);
        drop(old);
        Ok(ok)
    }

    fn _watch_sampler_stop(&self, py: Python<'_>) -> PyResult<()> {
        let old = self.sampler.borrow_mut(py)?.take();
        drop(old);
        Ok(())
    }

    /// Stack samples the native sampler took during slice `seq`:
    /// `[(t_ns, [(filename, lineno, function), ...outermost first]), ...]`.
    fn _native_samples(&self, py: Python<'_>, seq: u64) -> PyResult<Vec<Sample>> {
        Ok(self.sampler.borrow(py)?.as_ref().map(|s| s.samples(seq)).unwrap_or_default())
    }

    /// Set the histogram bounds (ns, ascending) and reset the slice totals.
    fn _slice_stats_reset(&self, py: Python<'_>, bounds_ns: Vec<u64>) -> PyResult<()> {
        let mut st = self.stats.borrow_mut(py)?;
        *st = SliceStats { hist: vec![0; bounds_ns.len()], bounds: bounds_ns, ..SliceStats::default() };
        Ok(())
    }

    /// Forget the longest slice seen (the loop-lag gauge is "longest since the last scrape").
    fn _slice_max_reset(&self, py: Python<'_>) -> PyResult<()> {
        self.stats.borrow_mut(py)?.max_ns = 0;
        Ok(())
    }

    /// `(count, total_ns, max_ns, hist)` over every slice timed since the last reset;
    /// `hist[i]` counts slices longer than bound `i`.
    fn _slice_stats(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, Vec<u64>)> {
        let st = self.stats.borrow(py)?;
        Ok((st.count, st.total_ns, st.max_ns, st.hist.clone()))
    }

    #[getter]
    fn _slice_seq(&self) -> u64 {
        self.slice.seq.load(Ordering::Relaxed)
    }

    #[getter]
    fn _slice_start_ns(&self) -> u64 {
        self.slice.start_ns.load(Ordering::Acquire)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(st) = self.st.try_borrow_unattached() {
            for h in &st.ready {
                visit.call(h.as_any())?;
            }
            for h in st.timers.iter() {
                visit.call(h)?;
            }
            for e in st.fds.values() {
                visit.call(&e.reader)?;
                visit.call(&e.writer)?;
                visit.call(&e.fileobj)?;
            }
            for m in st.multishots.values() {
                visit.call(&m.callback)?;
                visit.call(&m.context)?;
                visit.call(&m.then)?;
            }
            for c in &st.held {
                visit.call(&c.callback)?;
                visit.call(&c.item)?;
                visit.call(&c.context)?;
            }
        }
        if let Some(h) = self.watch_hook.try_borrow_unattached() {
            visit.call(&*h)?;
        }
        if let Some(list) = self.flush.try_borrow_unattached() {
            for io in list.iter() {
                visit.call(io)?;
            }
        }
        if let Some(ev) = self.slow_audit.try_borrow_unattached() {
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
        let taken = self.st.borrow_mut(py).ok().map(|mut st| std::mem::take(&mut *st));
        let hook = self.watch_hook.borrow_mut(py).ok().and_then(|mut h| h.take());
        let flush = self.flush.borrow_mut(py).ok().map(|mut f| std::mem::take(&mut *f));
        drop((taken, hook, flush));
    }
}

#[cfg(test)]
mod tests {
    use super::{deadline_after, seconds_to_ns};

    #[test]
    fn negative_delays_keep_their_order() {
        let now = 10_000_000_000;
        assert!(deadline_after(now, -2.0) < deadline_after(now, -1.0));
        assert!(deadline_after(now, -1.0) < deadline_after(now, 0.0));
        assert_eq!(deadline_after(now, 0.0), now);
        assert_eq!(deadline_after(now, f64::NAN), 0);
        assert_eq!(deadline_after(now, -1e300), 0);
        assert_eq!(deadline_after(now, f64::INFINITY), u64::MAX);
    }

    #[test]
    fn deadlines_round_up_and_saturate() {
        assert_eq!(seconds_to_ns(f64::NAN), 0);
        assert_eq!(seconds_to_ns(-1.0), 0);
        assert_eq!(seconds_to_ns(0.0), 0);
        assert_eq!(seconds_to_ns(1e-10), 1);
        assert_eq!(seconds_to_ns(1.5), 1_500_000_000);
        assert_eq!(seconds_to_ns(f64::INFINITY), u64::MAX);
        assert_eq!(seconds_to_ns(1e300), u64::MAX);
    }
}
