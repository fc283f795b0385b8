//! `StreamIO`: the native I/O of one stream-socket transport (TCP or Unix).
//!
//! What it owns, and the invariants the Python transport (`ringloop._streams`) relies on:
//! - the **write buffer**: `bytes` objects queued in order, `off` bytes of the first already
//!   sent. `size` is always the number of unsent bytes; the Python side reads it as
//!   `get_write_buffer_size()` and as asyncio's `_buffer` truthiness.
//! - **when bytes go out.** The first `write()` of a loop iteration on an idle transport sends
//!   at once (asyncio's own behaviour, so a lone write is never delayed); later writes in the
//!   same iteration are appended and the loop flushes them all with one `sendmsg` after the
//!   iteration's callbacks ran (unless large: see `COALESCE_BELOW`). A pipelined client's sixteen responses thus cost two syscalls,
//!   not sixteen. Whatever the kernel does not take waits for writability (a writer callback
//!   on the loop), and is sent from there.
//! - **flow control**: above `high` the transport's `_maybe_pause_protocol` is called (it
//!   re-checks, calls `pause_writing` and records the pause in `pause_signalled`); once a
//!   flush brings the buffer to `low` or below, `_maybe_resume_protocol`.
//! - `conn_lost`, `eof` (write_eof asked) and `sendfile_busy` mirror asyncio's `_conn_lost`,
//!   `_eof` and `_empty_waiter is not None`: the write path checks them, so they live here.
//! - `watch_drain`: the Python side wants `_on_drained()` when the buffer empties (close with
//!   data pending, write_eof, sendfile's empty waiter). Left unset on the hot path, so a
//!   drained buffer costs no Python call.
//!
//! Reads copy into exact-size `bytes` from the per-thread scratch buffer (`buffers`).
//!
//! **The read-order invariant.** Bytes reach the protocol in the order the kernel delivered
//! them, whatever the pause/resume/read-mode history. Completions of a multishot recv reach
//! `_on_recv` in kernel order (the router keeps per-operation order, and a cancelled recv's
//! last completions are posted before a new recv is armed), but they may still be in the
//! ready queue when the protocol pauses, resumes, pauses again or the read mode switches. So:
//! - `pending` is the transport's one inbox: a completion (data, EOF or error) goes to the
//!   protocol at once only while reading *and* the inbox is empty; otherwise it is appended;
//! - the inbox is emptied front first by `_drain_pending` only, which one resume schedules and
//!   which stops the moment the protocol pauses again (a `BufferedProtocol`'s unread rest goes
//!   back to the front);
//! - nothing reads the socket while the inbox holds anything (`_on_readable` waits for the
//!   drain): whatever the socket holds is later than everything in the inbox.
//!
//! An EOF held in the inbox is delivered after the data before it, never instead of it.
//! (Before this rule, a resume re-queued held reads behind completions already in the ready
//! queue: a 64 KiB block arrived ahead of its turn, and an EOF could overtake held data.)

use std::collections::VecDeque;
use std::os::fd::RawFd;

use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PySystemExit, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};

use super::buffers::{is_bytes_like, ring_read_bytes, with_scratch, View, MAX_READ};
use super::reading::{stop_reading, ReadState};
use crate::errors::os_error;
use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;
use crate::eventloop::handle::Args;
use crate::eventloop::iteration::FlushAtEnd;
use crate::reactor::sys::bytes_waiting;
use crate::reactor::{OpKind, RingRead};

/// Writes this large to an idle transport go out at once even after the iteration's first:
/// coalescing saves a syscall that is small next to copying them, while holding them until
/// the flush kept megabytes of `bytes` alive per iteration (64 connections x 64 KiB), which
/// glibc trimmed and faulted back in every iteration.
const COALESCE_BELOW: usize = 16 * 1024;

/// A multishot read this large switches the transport to reading on readiness (io_uring):
/// a message that spans several 64 KiB ring buffers costs a completion per segment and a
/// second copy out of the ring, where one `recv` straight into an exact-size `bytes` (see
/// `EXACT_AFTER`) copies once. 100 KiB echo: 28-29 µs per message on multishot recv, 23.5-24
/// on readiness reads with exact-size receives, uvloop 23.7-24 (interleaved runs).
const BULK_READ: usize = 64 * 1024;
/// Readiness reads (after a switch) this small ...
const SMALL_READ: usize = 16 * 1024;
/// ... this many times in a row switch back to the multishot recv, cheaper for small reads.
const SMALL_READS_BACK: u32 = 32;
/// After a read this large the next readiness read asks `FIONREAD` and, when at least
/// `EXACT_MIN` bytes wait, receives them straight into a `bytes` of that size: one copy
/// instead of two (into the scratch buffer, then into `bytes`), for one `ioctl`. Small reads
/// never pay the `ioctl`.
const EXACT_AFTER: usize = 64 * 1024;
const EXACT_MIN: usize = 16 * 1024;

/// iovecs per `sendmsg`; well under IOV_MAX (1024), and more chunks than one flush ever needs.
const MAX_IOV: usize = 64;
/// asyncio's `constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES`.
const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;


/// How reads reach the protocol, picked by `set_protocol` as asyncio does.
enum Sink {
    None,
    Data(Py<PyAny>),
    Buffered { get_buffer: Py<PyAny>, buffer_updated: Py<PyAny> },
}

impl Sink {
    fn clone_ref(&self, py: Python<'_>) -> Sink {
        match self {
            Sink::None => Sink::None,
            Sink::Data(cb) => Sink::Data(cb.clone_ref(py)),
            Sink::Buffered { get_buffer, buffer_updated } => {
                Sink::Buffered { get_buffer: get_buffer.clone_ref(py), buffer_updated: buffer_updated.clone_ref(py) }
            }
        }
    }
}

struct StreamState {
    transport: Option<Py<PyAny>>,
    sink: Sink,
    wbuf: VecDeque<Py<PyBytes>>,
    off: usize,
    size: usize,
    high: usize,
    low: usize,
    /// `_maybe_pause_protocol` was called and `_maybe_resume_protocol` not yet.
    pause_signalled: bool,
    /// Waiting for writability (a writer callback is registered on the loop).
    armed: bool,
    /// In the loop's end-of-iteration flush list.
    queued: bool,
    /// Loop iteration of the last direct send (see the module docs).
    last_direct: u64,
    eof: bool,
    conn_lost: u32,
    sendfile_busy: bool,
    watch_drain: bool,
    detached: bool,
    /// Reading is on, and through what (io_uring: the multishot recv feeding `_on_recv`).
    read: ReadState,
    /// io_uring: reads are large, so this transport reads on readiness (see `BULK_READ`).
    bulk: bool,
    /// Going bulk: the multishot recv was stopped and still delivers what it read;
    /// `_on_switched` installs the reader after its last read.
    switching: bool,
    /// Bulk readiness reads below `SMALL_READ` in a row.
    small_reads: u32,
    /// The last readiness read was large: the next one receives an exact size (`EXACT_AFTER`).
    exact: bool,
    /// The inbox (see the module docs): completions that could not go to the protocol at
    /// once, as `bytes`, `0` (EOF) or `-errno`, oldest first.
    pending: VecDeque<Py<PyAny>>,
    /// `_drain_pending` is in the ready queue.
    drain_scheduled: bool,
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct StreamIO {
    fd: RawFd,
    loop_: Py<LoopCore>,
    st: GilCell<StreamState>,
}

fn is_fatal_to_loop(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py)
}

/// asyncio's type check of `write`'s argument, with its message.
fn check_bytes_like(data: &Bound<'_, PyAny>) -> PyResult<()> {
    if is_bytes_like(data) {
        return Ok(());
    }
    let name = data.get_type().name()?;
    Err(PyTypeError::new_err(format!("data argument must be a bytes-like object, not {}", name.repr()?)))
}

fn send_flags() -> i32 {
    // MSG_NOSIGNAL: a write to a reset peer must raise EPIPE, never kill the process with
    // SIGPIPE (Python ignores SIGPIPE itself, but an embedding application may not).
    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
}

enum Sent {
    All,
    Part(usize),
    Err(std::io::Error),
}

fn send_now(fd: RawFd, data: &[u8]) -> Sent {
    // SAFETY: `data` is a valid slice for the duration of the call.
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), send_flags()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Sent::Part(0),
            _ => Sent::Err(e),
        };
    }
    if n as usize == data.len() {
        Sent::All
    } else {
        Sent::Part(n as usize)
    }
}

impl StreamState {
    fn push(&mut self, py: Python<'_>, b: Py<PyBytes>) {
        self.size += b.bind(py).as_bytes().len();
        self.wbuf.push_back(b);
    }

    /// Forget `n` sent bytes from the front. Returns the dropped chunks so the caller can
    /// release them after the borrow ends.
    fn consume(&mut self, py: Python<'_>, mut n: usize, dropped: &mut Vec<Py<PyBytes>>) {
        self.size -= n;
        while n > 0 {
            let front_len = self.wbuf.front().expect("size counts queued bytes").bind(py).as_bytes().len();
            let left = front_len - self.off;
            if n >= left {
                n -= left;
                self.off = 0;
                dropped.push(self.wbuf.pop_front().expect("checked"));
            } else {
                self.off += n;
                n = 0;
            }
        }
    }
}

impl StreamIO {
    fn transport(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.st.borrow(py)?.transport.as_ref().map(|t| t.clone_ref(py)))
    }

    /// asyncio's `_fatal_error(exc, message)` on the transport.
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        if is_fatal_to_loop(py, &err) {
            return Err(err);
        }
        if let Some(t) = self.transport(py)? {
            t.call_method1(py, intern!(py, "_fatal_error"), (err.into_value(py), message))?;
        }
        Ok(())
    }

    fn arm_writer(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            if st.armed || st.detached {
                return Ok(());
            }
            st.armed = true;
        }
        let cb = slf.getattr(intern!(py, "_on_writable"))?;
        LoopCore::set_fd_callback_raw(this.loop_.bind(py), this.fd, &cb, true)
    }

    fn disarm_writer(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            if !st.armed {
                return Ok(());
            }
            st.armed = false;
        }
        LoopCore::remove_fd_callback_raw(this.loop_.bind(py), this.fd, true).map(|_| ())
    }

    /// Send as much of the buffer as the kernel takes, with one `sendmsg` per round; then do
    /// what the new buffer size calls for (wait for writability, resume the protocol, tell the
    /// Python side the buffer drained).
    pub(crate) fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut dropped = Vec::new();
        let outcome = {
            let mut st = this.st.borrow_mut(py)?;
            st.queued = false;
            if st.detached || st.conn_lost > 0 {
                return Ok(());
            }
            loop {
                if st.size == 0 {
                    break Ok(true);
                }
                let mut iov: [libc::iovec; MAX_IOV] = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOV];
                let mut n_iov = 0;
                let mut total = 0usize;
                for (i, b) in st.wbuf.iter().take(MAX_IOV).enumerate() {
                    let bytes = b.bind(py).as_bytes();
                    let s = if i == 0 { &bytes[st.off..] } else { bytes };
                    iov[i] = libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() };
                    total += s.len();
                    n_iov += 1;
                }
                // SAFETY: msghdr is plain data; zeroed is a valid "no name, no control" header.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.as_mut_ptr();
                msg.msg_iovlen = n_iov;
                // SAFETY: every iovec points into a `bytes` object the buffer keeps alive for
                // the duration of the call.
                let n = unsafe { libc::sendmsg(this.fd, &msg, send_flags()) };
                if n < 0 {
                    let e = std::io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EINTR) => continue,
                        Some(libc::EAGAIN) => break Ok(false),
                        _ => {
                            st.size = 0;
                            st.off = 0;
                            dropped.extend(st.wbuf.drain(..));
                            break Err(e);
                        }
                    }
                }
                let n = n as usize;
                st.consume(py, n, &mut dropped);
                if n < total {
                    break Ok(false);
                }
            }
        };
        drop(dropped);
        match outcome {
            Err(e) => {
                Self::disarm_writer(slf)?;
                if let Some(t) = this.transport(py)? {
                    t.call_method1(py, intern!(py, "_write_error"), (os_error(e).into_value(py),))?;
                }
                Ok(())
            }
            Ok(drained) => {
                let (resume, notify) = {
                    let mut st = this.st.borrow_mut(py)?;
                    let resume = st.pause_signalled && st.size <= st.low;
                    if resume {
                        st.pause_signalled = false;
                    }
                    (resume, drained && (st.watch_drain || st.eof))
                };
                if drained {
                    Self::disarm_writer(slf)?;
                } else {
                    Self::arm_writer(slf)?;
                }
                if resume {
                    if let Some(t) = this.transport(py)? {
                        t.call_method0(py, intern!(py, "_maybe_resume_protocol"))?;
                    }
                }
                // `_maybe_resume_protocol` may have written more: only a still-empty buffer
                // counts as drained.
                if notify && this.st.borrow(py)?.size == 0 {
                    if let Some(t) = this.transport(py)? {
                        t.call_method0(py, intern!(py, "_on_drained"))?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Queue `data` (whatever `write` did not send) and make sure it goes out.
    fn buffer(slf: &Bound<'_, Self>, data: Py<PyBytes>, wait_writable: bool) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (queue, pause) = {
            let mut st = this.st.borrow_mut(py)?;
            st.push(py, data);
            let queue = !wait_writable && !st.armed && !st.queued;
            if queue {
                st.queued = true;
            }
            // asyncio calls _maybe_pause_protocol after every buffered write, a no-op once
            // paused; the Python override records a pause in `pause_signalled`, so calls
            // stop here until a flush resumes the protocol.
            let pause = st.size > st.high && !st.pause_signalled;
            (queue, pause)
        };
        if wait_writable {
            Self::arm_writer(slf)?;
        } else if queue {
            LoopCore::queue_flush(this.loop_.bind(py), slf.clone().unbind())?;
        }
        if pause {
            if let Some(t) = this.transport(py)? {
                t.call_method0(py, intern!(py, "_maybe_pause_protocol"))?;
            }
        }
        Ok(())
    }

    /// The checks asyncio's `write` makes before touching the socket. `Ok(false)`: nothing to
    /// send (empty data, or the connection is lost and the write was counted).
    fn write_allowed(&self, py: Python<'_>, nbytes: usize) -> PyResult<bool> {
        let mut st = self.st.borrow_mut(py)?;
        if st.eof {
            return Err(PyRuntimeError::new_err("Cannot call write() after write_eof()"));
        }
        if st.sendfile_busy {
            return Err(PyRuntimeError::new_err("unable to write; sendfile is in progress"));
        }
        if nbytes == 0 {
            return Ok(false);
        }
        if st.conn_lost > 0 || st.detached {
            let warn = st.conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES;
            st.conn_lost += 1;
            drop(st);
            if warn {
                crate::py::asyncio_logger(py)?.call_method1(intern!(py, "warning"), ("socket.send() raised exception.",))?;
            }
            return Ok(false);
        }
        Ok(true)
    }

    fn write_one(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let bytes = data.cast::<PyBytes>().ok();
        if bytes.is_none() {
            check_bytes_like(data)?;
        }
        let view = match bytes {
            Some(_) => None,
            None => Some(View::new(data, ffi::PyBUF_SIMPLE)?),
        };
        let payload: &[u8] = match (&bytes, &view) {
            (Some(b), _) => b.as_bytes(),
            (None, Some(v)) => v.bytes(),
            _ => unreachable!("one of the two is set"),
        };
        if !this.write_allowed(py, payload.len())? {
            return Ok(());
        }
        let iteration = this.loop_.get().iteration();
        let direct = {
            let mut st = this.st.borrow_mut(py)?;
            let idle = st.size == 0 && !st.armed && !st.queued;
            let direct = idle && (st.last_direct != iteration || payload.len() >= COALESCE_BELOW);
            if direct {
                st.last_direct = iteration;
            }
            direct
        };
        if !direct {
            let owned = match bytes {
                Some(b) => b.clone().unbind(),
                None => PyBytes::new(py, payload).unbind(),
            };
            drop(view);
            return Self::buffer(slf, owned, false);
        }
        match send_now(this.fd, payload) {
            Sent::All => Ok(()),
            Sent::Part(n) => {
                let rest = match (n, bytes) {
                    (0, Some(b)) => b.clone().unbind(),
                    _ => PyBytes::new(py, &payload[n..]).unbind(),
                };
                drop(view);
                Self::buffer(slf, rest, true)
            }
            Sent::Err(e) => {
                drop(view);
                this.fatal(py, os_error(e), "Fatal write error on socket transport")
            }
        }
    }

    /// One `recv` of up to `want` bytes straight into a `bytes` of that size (shrunk to what
    /// came, if less): `Ok(None)` at EOF, as `recv_scratch`.
    fn recv_exact(&self, py: Python<'_>, want: usize) -> PyResult<Result<Option<Py<PyBytes>>, std::io::Error>> {
        // SAFETY: the writer is created, written through `GetData` (at most its `want` bytes)
        // and then either finished or discarded exactly once; a null result sets the error.
        unsafe {
            let w = ffi::compat::PyBytesWriter_Create(want as ffi::Py_ssize_t);
            if w.is_null() {
                return Err(PyErr::fetch(py));
            }
            let n = libc::recv(self.fd, ffi::compat::PyBytesWriter_GetData(w), want, 0);
            if n <= 0 {
                let e = std::io::Error::last_os_error();
                ffi::compat::PyBytesWriter_Discard(w);
                return Ok(if n == 0 { Ok(None) } else { Err(e) });
            }
            let b = ffi::compat::PyBytesWriter_FinishWithSize(w, n as ffi::Py_ssize_t);
            Ok(Ok(Some(Bound::from_owned_ptr_or_err(py, b)?.cast_into_unchecked::<PyBytes>().unbind())))
        }
    }

    fn read_data(slf: &Bound<'_, Self>, cb: &Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        // See `EXACT_AFTER`: only after a large read is the ioctl worth it.
        let waiting = if this.st.borrow(py)?.exact { bytes_waiting(this.fd) } else { 0 };
        let res = if waiting >= EXACT_MIN { this.recv_exact(py, waiting.min(MAX_READ))? } else { this.recv_scratch(py) };
        let data = match res {
            Ok(Some(d)) => d,
            Ok(None) => return this.on_eof(py),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => return Ok(()),
            Err(e) => return this.fatal(py, os_error(e), "Fatal read error on socket transport"),
        };
        let n = data.bind(py).as_bytes().len();
        this.to_data_received(py, cb, data.bind(py))?;
        Self::after_readiness_read(slf, n)
    }

    /// Bookkeeping after a readiness read of `n` bytes: whether the next one receives an exact
    /// size, and whether a bulk transport's reads became small enough to go back to the
    /// multishot recv.
    fn after_readiness_read(slf: &Bound<'_, Self>, n: usize) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let back = {
            let mut st = this.st.borrow_mut(py)?;
            st.exact = n >= EXACT_AFTER;
            if !st.bulk {
                return Ok(());
            }
            st.small_reads = if n < SMALL_READ { st.small_reads + 1 } else { 0 };
            let back = st.small_reads >= SMALL_READS_BACK && st.read.on && !st.switching && !st.detached && st.conn_lost == 0;
            if back {
                st.bulk = false;
                st.small_reads = 0;
            }
            back
        };
        if back {
            LoopCore::remove_fd_callback_raw(this.loop_.bind(py), this.fd, false)?;
            Self::read_with_recv(slf)?;
        }
        Ok(())
    }

    /// Read with a multishot recv feeding `_on_recv` (or, where the loop has none, on
    /// readiness through `_on_readable`; see `LoopCore::read_start`).
    fn read_with_recv(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let on_recv = slf.getattr(intern!(py, "_on_recv"))?.unbind();
        let token = LoopCore::read_start(this.loop_.bind(py), this.fd, OpKind::Recv, on_recv, slf.as_any())?;
        this.st.borrow_mut(py)?.read.token = token;
        Ok(())
    }

    /// Read on readiness: `_on_readable` as the fd's reader callback.
    fn read_on_readiness(slf: &Bound<'_, Self>) -> PyResult<()> {
        let on_readable = slf.getattr(intern!(slf.py(), "_on_readable"))?;
        LoopCore::set_fd_callback_raw(slf.get().loop_.bind(slf.py()), slf.get().fd, &on_readable, false)
    }

    /// After a multishot read of `n` bytes: a large one switches the transport to readiness
    /// reads (see `BULK_READ`). The recv is stopped first and the reader installed only after
    /// its last read (`_on_switched`), so reads stay in order.
    fn maybe_go_bulk(slf: &Bound<'_, Self>, n: usize) -> PyResult<()> {
        if n < BULK_READ {
            return Ok(());
        }
        let py = slf.py();
        let this = slf.get();
        let token = {
            let mut st = this.st.borrow_mut(py)?;
            if !st.read.on || st.switching || st.detached || st.conn_lost > 0 {
                return Ok(());
            }
            let Some(token) = st.read.token.take() else { return Ok(()) };
            st.bulk = true;
            st.switching = true;
            st.small_reads = 0;
            st.exact = true;
            token
        };
        let then = slf.getattr(intern!(py, "_on_switched"))?.unbind();
        if !LoopCore::read_stop_then(this.loop_.bind(py), token, then)? {
            Self::_on_switched(slf, py.None().into_bound(py))?;
        }
        Ok(())
    }

    fn recv_scratch(&self, py: Python<'_>) -> Result<Option<Py<PyBytes>>, std::io::Error> {
        with_scratch(|s| -> Result<Option<Py<PyBytes>>, std::io::Error> {
            // SAFETY: the scratch buffer is MAX_READ writable bytes owned by this thread.
            let n = unsafe { libc::recv(self.fd, s.as_mut_ptr().cast(), MAX_READ, 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                return Ok(None);
            }
            Ok(Some(PyBytes::new(py, &s[..n as usize]).unbind()))
        })
    }

    fn to_data_received(&self, py: Python<'_>, cb: &Py<PyAny>, data: &Bound<'_, PyBytes>) -> PyResult<()> {
        match cb.call1(py, (data,)) {
            Ok(_) => Ok(()),
            Err(e) => self.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
        }
    }

    /// The protocol's next buffer (asyncio's `get_buffer` checks), exported writable. `None`:
    /// the failure was reported through `_fatal_error`.
    fn protocol_buffer(&self, py: Python<'_>, get_buffer: &Py<PyAny>, sizehint: isize) -> PyResult<Option<View>> {
        let buf = match get_buffer.call1(py, (sizehint,)).and_then(|b| {
            let b = b.into_bound(py);
            if b.len()? == 0 {
                return Err(PyRuntimeError::new_err("get_buffer() returned an empty buffer"));
            }
            Ok(b)
        }) {
            Ok(b) => b,
            Err(e) => return self.fatal(py, e, "Fatal error: protocol.get_buffer() call failed.").map(|_| None),
        };
        match View::new(&buf, ffi::PyBUF_WRITABLE) {
            Ok(v) => Ok(Some(v)),
            Err(e) => self.fatal(py, e, "Fatal read error on socket transport").map(|_| None),
        }
    }

    fn read_buffered(slf: &Bound<'_, Self>, get_buffer: &Py<PyAny>, buffer_updated: &Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.read_buffered_once(py, get_buffer, buffer_updated)?.map_or(Ok(()), |n| Self::after_readiness_read(slf, n))
    }

    /// One `recv` into the protocol's buffer; `Some(n)`: `n` bytes went to `buffer_updated`.
    fn read_buffered_once(&self, py: Python<'_>, get_buffer: &Py<PyAny>, buffer_updated: &Py<PyAny>) -> PyResult<Option<usize>> {
        let n = {
            let Some(view) = self.protocol_buffer(py, get_buffer, -1)? else { return Ok(None) };
            // SAFETY: the writable export guarantees `len` bytes at `ptr` while `view` lives.
            let n = unsafe { libc::recv(self.fd, view.ptr().cast(), view.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                drop(view);
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                    _ => self.fatal(py, os_error(e), "Fatal read error on socket transport").map(|_| None),
                };
            }
            n as usize
        };
        if n == 0 {
            return self.on_eof(py).map(|_| None);
        }
        if let Err(e) = buffer_updated.call1(py, (n,)) {
            return self.fatal(py, e, "Fatal error: protocol.buffer_updated() call failed.").map(|_| None);
        }
        Ok(Some(n))
    }

    /// A multishot recv's bytes, for a `BufferedProtocol`: copied into as many of its buffers
    /// as it takes.
    fn feed_buffered(&self, py: Python<'_>, mut src: Source<'_>, get_buffer: &Py<PyAny>, buffer_updated: &Py<PyAny>) -> PyResult<()> {
        while src.len() > 0 {
            let n = {
                let Some(view) = self.protocol_buffer(py, get_buffer, src.len() as isize)? else { return Ok(()) };
                // SAFETY: the writable export holds `len` bytes at `ptr` while `view` lives, and
                // no Python code runs until it is dropped.
                let dst = unsafe { std::slice::from_raw_parts_mut(view.ptr(), view.len()) };
                src.copy_to(dst)
            };
            if n == 0 {
                break; // nothing copied into a non-empty buffer: cannot happen, never spin
            }
            if let Err(e) = buffer_updated.call1(py, (n,)) {
                return self.fatal(py, e, "Fatal error: protocol.buffer_updated() call failed.");
            }
            if !self.st.borrow(py)?.read.on {
                // The protocol paused reading (or closed) in buffer_updated: keep the rest.
                if let Some(left) = src.into_rest(py)? {
                    self.st.borrow_mut(py)?.pending.push_front(left);
                }
                break;
            }
        }
        Ok(())
    }

    /// Queue `_drain_pending` if reading with a non-empty inbox and none is queued yet.
    fn schedule_drain(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if !st.read.on || st.pending.is_empty() || st.drain_scheduled {
                return Ok(());
            }
            st.drain_scheduled = true;
        }
        let drain = slf.getattr(intern!(py, "_drain_pending"))?;
        LoopCore::call_soon_impl(slf.get().loop_.bind(py), &drain, Args::None, None).map(|_| ())
    }

    /// The end of the stream: `0` is EOF, `-errno` a read error.
    fn on_end(&self, py: Python<'_>, res: i32) -> PyResult<()> {
        if res == 0 {
            return self.on_eof(py);
        }
        let e = std::io::Error::from_raw_os_error(-res);
        self.fatal(py, os_error(e), "Fatal read error on socket transport")
    }

    fn on_eof(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(t) = self.transport(py)? {
            t.call_method0(py, intern!(py, "_read_ready__on_eof"))?;
        }
        Ok(())
    }
}

impl FlushAtEnd for StreamIO {
    fn flush_at_end(slf: &Bound<'_, Self>) -> PyResult<()> {
        StreamIO::flush(slf)
    }
}

#[pymethods]
impl StreamIO {
    #[new]
    fn py_new(loop_: &Bound<'_, PyAny>, fd: RawFd, transport: Py<PyAny>) -> PyResult<Self> {
        let loop_ = loop_.cast::<LoopCore>()?.clone().unbind();
        Ok(StreamIO {
            fd,
            loop_,
            st: GilCell::new(StreamState {
                transport: Some(transport),
                sink: Sink::None,
                wbuf: VecDeque::new(),
                off: 0,
                size: 0,
                high: 64 * 1024,
                low: 16 * 1024,
                pause_signalled: false,
                armed: false,
                queued: false,
                last_direct: u64::MAX,
                eof: false,
                conn_lost: 0,
                sendfile_busy: false,
                watch_drain: false,
                detached: false,
                read: ReadState::default(),
                bulk: false,
                switching: false,
                small_reads: 0,
                exact: false,
                pending: VecDeque::new(),
                drain_scheduled: false,
            }),
        })
    }

    /// Pick how reads reach `protocol`: `get_buffer`/`buffer_updated` for a
    /// `BufferedProtocol`, else `data_received` (looked up once here, not per read).
    fn set_protocol(&self, py: Python<'_>, protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        let sink = if protocol.is_instance(crate::py::buffered_protocol(py)?)? {
            Sink::Buffered {
                get_buffer: protocol.getattr(intern!(py, "get_buffer"))?.unbind(),
                buffer_updated: protocol.getattr(intern!(py, "buffer_updated"))?.unbind(),
            }
        } else {
            Sink::Data(protocol.getattr(intern!(py, "data_received"))?.unbind())
        };
        let old = std::mem::replace(&mut self.st.borrow_mut(py)?.sink, sink);
        drop(old);
        Ok(())
    }

    /// The fd's reader callback: one read, handed to the protocol.
    fn _on_readable(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let sink = {
            let st = slf.get().st.borrow(py)?;
            // A non-empty inbox is older than anything the socket holds: it goes first.
            if st.conn_lost > 0 || st.detached || !st.pending.is_empty() {
                return Ok(());
            }
            st.sink.clone_ref(py)
        };
        match sink {
            Sink::None => Ok(()),
            Sink::Data(cb) => Self::read_data(slf, &cb),
            Sink::Buffered { get_buffer, buffer_updated } => Self::read_buffered(slf, &get_buffer, &buffer_updated),
        }
    }

    /// Start reading: a multishot recv on io_uring, else a reader callback on readiness.
    /// Completions held while paused are delivered first, by `_drain_pending`.
    fn start_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (switching, bulk) = {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.read.on || st.detached || st.conn_lost > 0 {
                return Ok(());
            }
            st.read.on = true;
            (st.switching, st.bulk)
        };
        Self::schedule_drain(slf)?;
        if switching {
            return Ok(()); // `_on_switched` installs the reader
        }
        if bulk {
            return Self::read_on_readiness(slf);
        }
        Self::read_with_recv(slf)
    }

    /// Deliver the inbox front first while reading (see the module docs); scheduled by
    /// `schedule_drain`. Stops as soon as the protocol pauses or the transport goes.
    fn _drain_pending(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.st.borrow_mut(py)?.drain_scheduled = false;
        loop {
            let (item, sink) = {
                let mut st = this.st.borrow_mut(py)?;
                if !st.read.on || st.conn_lost > 0 || st.detached {
                    return Ok(());
                }
                let Some(item) = st.pending.pop_front() else { return Ok(()) };
                (item.into_bound(py), st.sink.clone_ref(py))
            };
            if let Ok(b) = item.cast::<PyBytes>() {
                match sink {
                    Sink::None => {}
                    Sink::Data(cb) => this.to_data_received(py, &cb, b)?,
                    Sink::Buffered { get_buffer, buffer_updated } => this.feed_buffered(py, Source::Bytes(b.as_bytes()), &get_buffer, &buffer_updated)?,
                }
                continue;
            }
            this.on_end(py, item.extract()?)?;
        }
    }

    /// The stopped multishot recv delivered its last read (see `maybe_go_bulk`): read on
    /// readiness from now on, if still reading.
    fn _on_switched(slf: &Bound<'_, Self>, _item: Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let install = {
            let mut st = this.st.borrow_mut(py)?;
            st.switching = false;
            st.read.on && !st.detached && st.conn_lost == 0
        };
        if install {
            Self::read_on_readiness(slf)?;
        }
        Ok(())
    }

    /// How reads arrive now, for tests: "multishot", "switching" or "readiness".
    #[getter]
    fn read_mode(&self, py: Python<'_>) -> PyResult<&'static str> {
        let st = self.st.borrow(py)?;
        Ok(if st.switching {
            "switching"
        } else if st.read.token.is_some() {
            "multishot"
        } else {
            "readiness"
        })
    }

    /// Stop reading (pause, close, EOF kept open). On io_uring the recv is cancelled before
    /// this returns, so the socket may be closed right after.
    fn stop_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        stop_reading(this.loop_.bind(slf.py()), this.fd, &this.st, |st| &mut st.read)
    }

    #[getter]
    fn reading(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.read.on)
    }

    /// One completion of the multishot recv: a pending read (`n > 0`: its bytes are taken from
    /// the loop, see `LoopCore::take_read`), `0` at EOF, or `-errno`. It goes to the protocol
    /// now only while reading with an empty inbox; otherwise it joins the inbox.
    fn _on_recv(slf: &Bound<'_, Self>, item: Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let read = match item.extract::<i64>() {
            Ok(n) if n > 0 => match LoopCore::take_read(this.loop_.bind(py), n)? {
                Some(r) => Some(r),
                None => return Ok(()),
            },
            _ => None,
        };
        let (direct, sink) = {
            let st = this.st.borrow(py)?;
            if st.conn_lost > 0 || st.detached {
                return Ok(());
            }
            (st.read.on && st.pending.is_empty(), st.sink.clone_ref(py))
        };
        if !direct {
            let kept = match read {
                Some(r) => ring_read_bytes(py, r)?.into_any().unbind(),
                None => item.unbind(),
            };
            this.st.borrow_mut(py)?.pending.push_back(kept);
            // Reading with a non-empty inbox: a drain is due (normally already scheduled).
            return Self::schedule_drain(slf);
        }
        let Some(r) = read else { return this.on_end(py, item.extract()?) };
        let n = r.len();
        match sink {
            Sink::None => {}
            // Straight from the ring buffers into the protocol's buffer: no `bytes` between.
            Sink::Buffered { get_buffer, buffer_updated } => this.feed_buffered(py, Source::Read(r), &get_buffer, &buffer_updated)?,
            Sink::Data(cb) => {
                let b = ring_read_bytes(py, r)?;
                this.to_data_received(py, &cb, &b)?;
            }
        }
        Self::maybe_go_bulk(slf, n)
    }

    /// The fd's writer callback, registered only while unsent bytes wait for writability.
    fn _on_writable(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::flush(slf)
    }

    /// asyncio's `Transport.write`: type and state checks, then send or buffer.
    fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::write_one(slf, data)
    }

    /// Every chunk is checked first (like asyncio's `b"".join`, a bad item sends nothing),
    /// then queued in order; they leave together with one `sendmsg`.
    fn writelines(slf: &Bound<'_, Self>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let items: Vec<Bound<'_, PyAny>> = list_of_data.try_iter()?.collect::<PyResult<_>>()?;
        for item in &items {
            check_bytes_like(item)?;
        }
        // Mark this iteration's direct send as used, so every chunk is coalesced into the
        // end-of-iteration flush rather than the first one going out alone.
        {
            let iteration = slf.get().loop_.get().iteration();
            let mut st = slf.get().st.borrow_mut(py)?;
            st.last_direct = iteration;
        }
        for item in &items {
            Self::write_one(slf, item)?;
        }
        Ok(())
    }

    /// Set by the transport's `_maybe_pause_protocol` when it paused the protocol (after a
    /// write, or a water mark lowered below the buffer): the next flush that drains to `low`
    /// calls `_maybe_resume_protocol`.
    #[setter]
    fn set_pause_signalled(&self, py: Python<'_>, v: bool) -> PyResult<()> {
        self.st.borrow_mut(py)?.pause_signalled = v;
        Ok(())
    }

    #[getter]
    fn buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.st.borrow(py)?.size)
    }

    fn set_limits(&self, py: Python<'_>, high: usize, low: usize) -> PyResult<()> {
        let mut st = self.st.borrow_mut(py)?;
        st.high = high;
        st.low = low;
        Ok(())
    }

    #[getter]
    fn get_eof(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.eof)
    }
    #[setter]
    fn set_eof(&self, py: Python<'_>, v: bool) -> PyResult<()> {
        self.st.borrow_mut(py)?.eof = v;
        Ok(())
    }

    #[getter]
    fn get_conn_lost(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.st.borrow(py)?.conn_lost)
    }
    #[setter]
    fn set_conn_lost(&self, py: Python<'_>, v: u32) -> PyResult<()> {
        self.st.borrow_mut(py)?.conn_lost = v;
        Ok(())
    }

    #[setter]
    fn set_sendfile_busy(&self, py: Python<'_>, v: bool) -> PyResult<()> {
        self.st.borrow_mut(py)?.sendfile_busy = v;
        Ok(())
    }

    #[setter]
    fn set_watch_drain(&self, py: Python<'_>, v: bool) -> PyResult<()> {
        self.st.borrow_mut(py)?.watch_drain = v;
        Ok(())
    }

    /// Drop unsent data and stop waiting for writability (`abort`, fatal errors).
    fn clear_writes(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let dropped: Vec<Py<PyBytes>> = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.size = 0;
            st.off = 0;
            st.wbuf.drain(..).collect()
        };
        drop(dropped);
        Self::disarm_writer(slf)
    }

    /// The transport is gone: unregister, and drop the references to the transport and the
    /// protocol (they form a cycle through us).
    fn detach(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        Self::stop_reading(slf)?;
        Self::clear_writes(slf)?;
        let (t, sink, pending) = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.detached = true;
            (st.transport.take(), std::mem::replace(&mut st.sink, Sink::None), std::mem::take(&mut st.pending))
        };
        drop((t, sink, pending));
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        if let Some(t) = &st.transport {
            visit.call(t)?;
        }
        match &st.sink {
            Sink::None => {}
            Sink::Data(cb) => visit.call(cb)?,
            Sink::Buffered { get_buffer, buffer_updated } => {
                visit.call(get_buffer)?;
                visit.call(buffer_updated)?;
            }
        }
        for b in &st.wbuf {
            visit.call(b)?;
        }
        for p in &st.pending {
            visit.call(p)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // tp_clear runs with the GIL held; a live borrow means a method of ours is running,
        // in which case the cycle is not garbage yet. The references are dropped after the
        // borrow ends: a `__del__` they trigger may call back into us.
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| {
            st.size = 0;
            st.off = 0;
            (st.transport.take(), std::mem::replace(&mut st.sink, Sink::None), std::mem::take(&mut st.wbuf), std::mem::take(&mut st.pending))
        });
        drop(taken);
    }
}

/// What `feed_buffered` copies into the protocol's buffers: bytes held back while reading was
/// paused, or a read still in the loop's ring buffers.
enum Source<'a> {
    Bytes(&'a [u8]),
    Read(RingRead),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Bytes(b) => b.len(),
            Source::Read(r) => r.len(),
        }
    }

    fn copy_to(&mut self, dst: &mut [u8]) -> usize {
        match self {
            Source::Bytes(b) => {
                let n = dst.len().min(b.len());
                dst[..n].copy_from_slice(&b[..n]);
                *b = &b[n..];
                n
            }
            Source::Read(r) => r.copy_to(dst),
        }
    }

    /// What is left, as `bytes` for the pending queue (`None`: nothing).
    fn into_rest(self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.len() == 0 {
            return Ok(None);
        }
        Ok(match self {
            Source::Bytes(b) => Some(PyBytes::new(py, b).into_any().unbind()),
            Source::Read(r) => Some(ring_read_bytes(py, r)?.into_any().unbind()),
        })
    }
}
