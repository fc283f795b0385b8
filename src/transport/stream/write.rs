//! The write path of `StreamIO`.
//!
//! What it owns, and the invariants the Python transport relies on:
//! - the **write buffer**: `bytes` objects queued in order, `off` bytes of the first already
//!   sent. `size` is always the number of unsent bytes; the Python side reads it as
//!   `get_write_buffer_size()` and as asyncio's `_buffer` truthiness.
//! - **when bytes go out.** The first `write()` of a loop iteration on an idle transport sends
//!   at once (asyncio's own behaviour, so a lone write is never delayed); later writes in the
//!   same iteration are appended and the loop flushes them all with one `sendmsg` after the
//!   iteration's callbacks ran (unless large: see `COALESCE_BELOW`). A pipelined client's
//!   sixteen responses thus cost two syscalls, not sixteen. Whatever the kernel does not take waits for writability (a writer callback
//!   on the loop), and is sent from there.
//! - **flow control**: above `high` the transport's `_maybe_pause_protocol` is called (it
//!   re-checks, calls `pause_writing` and records the pause in `pause_signalled`); once a
//!   flush brings the buffer to `low` or below, `_maybe_resume_protocol`.

use std::os::fd::RawFd;

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::super::buffers::{is_bytes_like, View};
use super::super::reading::stop_reading;
use super::{Sink, StreamIO, StreamState};
use crate::errors::os_error;
use crate::eventloop::core::LoopCore;
use crate::eventloop::flush::FlushAtEnd;

/// Writes this large to an idle transport go out at once even after the iteration's first:
/// coalescing saves a syscall that is small next to copying them, while holding them until
/// the flush kept megabytes of `bytes` alive per iteration (64 connections x 64 KiB), which
/// glibc trimmed and faulted back in every iteration.
const COALESCE_BELOW: usize = 16 * 1024;

/// iovecs per `sendmsg`; well under IOV_MAX (1024), and more chunks than one flush ever needs.
const MAX_IOV: usize = 64;
/// asyncio's `constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES`.
const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;

/// asyncio's type check of `write`'s argument, with the running Python's message (3.14 renamed
/// "a bytes-like object" to the three types it names; ringloop still takes any bytes-like).
fn check_bytes_like(data: &Bound<'_, PyAny>) -> PyResult<()> {
    if is_bytes_like(data) {
        return Ok(());
    }
    let py = data.py();
    let name = data.get_type().name()?;
    let what = if py.version_info() >= (3, 14) {
        "a bytes, bytearray, or memoryview object"
    } else {
        "a bytes-like object"
    };
    Err(PyTypeError::new_err(format!("data argument must be {what}, not {}", name.repr()?)))
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
        LoopCore::set_fd_callback_raw(this.loop_.bind(py), this.fd, &cb, true, this.context(py)?)
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
        let bytes = data.cast::<PyBytes>().ok();
        if bytes.is_none() {
            check_bytes_like(data)?;
        }
        let next = {
            let view = match bytes {
                Some(_) => None,
                None => Some(View::new(data, ffi::PyBUF_SIMPLE)?),
            };
            let payload: &[u8] = match (&bytes, &view) {
                (Some(b), _) => b.as_bytes(),
                (None, Some(v)) => v.bytes(),
                _ => unreachable!("one of the two is set"),
            };
            Self::send_or_keep(slf, payload, bytes)?
            // The buffer view ends here: what follows may run Python code (`pause_writing`,
            // `connection_lost`) that resizes the very bytearray written.
        };
        Self::after_send(slf, next)
    }

    /// A native protocol's write (see `NativeProtocol`): `data` goes out at once when the
    /// transport is idle, with no `bytes` object; whatever waits is copied into one.
    pub(crate) fn write_slice(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        let next = Self::send_or_keep(slf, data, None)?;
        Self::after_send(slf, next)
    }

    /// A protocol's write to whichever transport it has: ringloop's own (`io`, `write_slice`),
    /// else another loop's (`transport.write`, with a `bytes` object), else nowhere (the
    /// connection is gone). The HTTP drivers' output path.
    pub(crate) fn write_to(py: Python<'_>, io: Option<&Py<Self>>, transport: Option<&Py<PyAny>>, data: &[u8]) -> PyResult<()> {
        match (io, transport) {
            (Some(io), _) => Self::write_slice(io.bind(py), data),
            (None, Some(t)) => t.call_method1(py, intern!(py, "write"), (PyBytes::new(py, data),)).map(drop),
            (None, None) => Ok(()),
        }
    }

    /// A native protocol's write of a `bytes` it holds (a large response body): queued as is,
    /// never copied.
    pub(crate) fn write_bytes(slf: &Bound<'_, Self>, data: &Bound<'_, PyBytes>) -> PyResult<()> {
        let next = Self::send_or_keep(slf, data.as_bytes(), Some(data))?;
        Self::after_send(slf, next)
    }

    /// Send `payload` at once if the transport is idle (see the module docs), and say what is
    /// left to do; `bytes` is the object it lives in, if any (kept without a copy). Runs no
    /// Python code but the lost-connection warning.
    fn send_or_keep(slf: &Bound<'_, Self>, payload: &[u8], bytes: Option<&Bound<'_, PyBytes>>) -> PyResult<AfterSend> {
        let py = slf.py();
        let this = slf.get();
        if !this.write_allowed(py, payload.len())? {
            return Ok(AfterSend::Done);
        }
        // TLS: the records go out instead (checked first: a refused write must not have
        // advanced the session).
        if let Some(records) = this.encrypt(py, payload)? {
            let next = Self::send_or_queue(slf, &records, None);
            this.give_back_records(py, records)?;
            return next;
        }
        Self::send_or_queue(slf, payload, bytes)
    }

    /// Bytes the session produced on its own (handshake flights, alerts, close_notify): sent
    /// as they are, in order with everything else.
    pub(super) fn send_raw(slf: &Bound<'_, Self>, records: &[u8]) -> PyResult<()> {
        {
            let st = slf.get().st.borrow(slf.py())?;
            if st.conn_lost > 0 || st.detached {
                return Ok(());
            }
        }
        let next = Self::send_or_queue(slf, records, None)?;
        Self::after_send(slf, next)
    }

    /// `send_or_keep` once the write is allowed.
    fn send_or_queue(slf: &Bound<'_, Self>, payload: &[u8], bytes: Option<&Bound<'_, PyBytes>>) -> PyResult<AfterSend> {
        let py = slf.py();
        let this = slf.get();
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
            return Ok(AfterSend::Buffer(owned, false));
        }
        Ok(match send_now(this.fd, payload) {
            Sent::All => AfterSend::Done,
            Sent::Part(n) => {
                let rest = match (n, bytes) {
                    (0, Some(b)) => b.clone().unbind(),
                    _ => PyBytes::new(py, &payload[n..]).unbind(),
                };
                AfterSend::Buffer(rest, true)
            }
            Sent::Err(e) => AfterSend::Fatal(e),
        })
    }

    fn after_send(slf: &Bound<'_, Self>, next: AfterSend) -> PyResult<()> {
        match next {
            AfterSend::Done => Ok(()),
            AfterSend::Buffer(rest, sent_some) => Self::buffer(slf, rest, sent_some),
            AfterSend::Fatal(e) => slf.get().fatal(slf.py(), os_error(e), "Fatal write error on socket transport"),
        }
    }
}

/// What a write leaves to do once its payload is no longer borrowed.
enum AfterSend {
    Done,
    /// Queue these bytes (`true`: part of the payload went out already).
    Buffer(Py<PyBytes>, bool),
    Fatal(std::io::Error),
}

impl FlushAtEnd for StreamIO {
    fn flush_at_end(slf: &Bound<'_, Self>) -> PyResult<()> {
        // Outside any handle (the end of the iteration): what the flush calls back
        // (`resume_writing`, `connection_lost`) runs in the protocol's context, as from the
        // writer callback.
        match slf.get().context(slf.py())? {
            None => StreamIO::flush(slf),
            Some(ctx) => crate::eventloop::handle::in_context(slf.py(), &ctx, || StreamIO::flush(slf)),
        }
    }
}

#[pymethods]
impl StreamIO {
    /// The fd's writer callback, registered only while unsent bytes wait for writability.
    fn _on_writable(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::flush(slf)
    }

    /// asyncio's `Transport.write`: type and state checks, then send or buffer.
    fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::write_one(slf, data)
    }

    /// Every chunk is checked first (like asyncio's list of memoryviews, a bad item sends
    /// nothing), then queued in order; they leave together with one `sendmsg`. As asyncio's
    /// on the running Python: from 3.12 an empty or `None` argument is a no-op (3.11's
    /// `b"".join` refuses `None`), and from 3.14 a falsy item is skipped (gh-155888: an empty
    /// chunk could never drain).
    fn writelines(slf: &Bound<'_, Self>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        if py.version_info() >= (3, 12) && !list_of_data.is_truthy()? {
            let st = slf.get().st.borrow(py)?;
            if st.eof {
                return Err(PyRuntimeError::new_err("Cannot call writelines() after write_eof()"));
            }
            if st.sendfile_busy {
                return Err(PyRuntimeError::new_err("unable to writelines; sendfile is in progress"));
            }
            return Ok(());
        }
        let skip_falsy = py.version_info() >= (3, 14);
        let mut items: Vec<Bound<'_, PyAny>> = Vec::new();
        for item in list_of_data.try_iter()? {
            let item = item?;
            if !skip_falsy || item.is_truthy()? {
                items.push(item);
            }
        }
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
        let this = slf.get();
        stop_reading(this.loop_.bind(py), this.fd, &this.st, |st| &mut st.read)?;
        Self::clear_writes(slf)?;
        let (t, sink, pending) = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.detached = true;
            (st.transport.take(), std::mem::replace(&mut st.sink, Sink::None), std::mem::take(&mut st.pending))
        };
        drop((t, sink, pending));
        Ok(())
    }
}
