//! The read path of `StreamIO`: multishot reads from the loop's ring (io_uring), readiness
//! reads (epoll, or a transport gone bulk), `BufferedProtocol` buffers, pause and resume.
//!
//! Reads copy into exact-size `bytes` (from the ring, or from the per-thread scratch buffer).
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


use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::super::buffers::{ring_read_bytes, with_scratch, View, MAX_READ};
use super::super::reading::reading_pymethods;
use super::tls::Cipher;
use super::{NativeSink, Received, Sink, StreamIO};
use crate::errors::os_error;
use crate::eventloop::core::LoopCore;
use crate::eventloop::handle::Args;
use crate::reactor::sys::bytes_waiting;
use crate::reactor::{OpKind, RingRead};

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


impl StreamIO {
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
        if this.tls_on(py)? {
            Self::receive_tls(slf, &Sink::Data(cb.clone_ref(py)), Cipher::Slice(data.bind(py).as_bytes()))?;
            return Self::after_readiness_read(slf, n);
        }
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
        let token = LoopCore::read_start(this.loop_.bind(py), this.fd, OpKind::Recv, on_recv, slf.as_any(), this.context(py)?)?;
        this.st.borrow_mut(py)?.read.token = token;
        Ok(())
    }

    /// Read on readiness: `_on_readable` as the fd's reader callback.
    fn read_on_readiness(slf: &Bound<'_, Self>) -> PyResult<()> {
        let on_readable = slf.getattr(intern!(slf.py(), "_on_readable"))?;
        LoopCore::set_fd_callback_raw(slf.get().loop_.bind(slf.py()), slf.get().fd, &on_readable, false, slf.get().context(slf.py())?)
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

    /// A readiness read for a native protocol: one `recv` into the scratch buffer, fed from
    /// there (no `bytes`), then processed once the scratch buffer is free again.
    fn read_native(slf: &Bound<'_, Self>, sink: &NativeSink) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let obj = sink.obj.bind(py);
        let tls = this.tls_on(py)?;
        let mut fed = None;
        let res = with_scratch(|s| -> PyResult<Result<usize, std::io::Error>> {
            // SAFETY: the scratch buffer is MAX_READ writable bytes owned by this thread.
            let n = unsafe { libc::recv(this.fd, s.as_mut_ptr().cast(), MAX_READ, 0) };
            if n < 0 {
                return Ok(Err(std::io::Error::last_os_error()));
            }
            if n > 0 && tls {
                // Only the session's work here: the plaintext goes on once the buffer is free.
                fed = this.decrypt(py, Cipher::Slice(&s[..n as usize]))?;
            } else if n > 0 {
                (sink.feed)(obj, Received::Slice(&s[..n as usize]))?;
            }
            Ok(Ok(n as usize))
        });
        if tls {
            return match res {
                Ok(Ok(0)) => this.on_eof(py),
                Ok(Ok(n)) => {
                    Self::after_decrypt(slf, &Sink::Native(sink.clone_ref(py)), fed)?;
                    Self::after_readiness_read(slf, n)
                }
                Ok(Err(e)) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => Ok(()),
                Ok(Err(e)) => this.fatal(py, os_error(e), "Fatal read error on socket transport"),
                Err(e) => this.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
            };
        }
        let n = match res {
            Ok(Ok(0)) => return this.on_eof(py),
            Ok(Ok(n)) => n,
            Ok(Err(e)) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => return Ok(()),
            Ok(Err(e)) => return this.fatal(py, os_error(e), "Fatal read error on socket transport"),
            Err(e) => return this.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
        };
        if let Err(e) = (sink.process)(obj) {
            return this.fatal(py, e, "Fatal error: protocol.data_received() call failed.");
        }
        Self::after_readiness_read(slf, n)
    }

    /// Hand a native protocol bytes it must take now (from the ring, or held while paused).
    pub(super) fn to_native(&self, py: Python<'_>, sink: &NativeSink, data: Received<'_>) -> PyResult<()> {
        let obj = sink.obj.bind(py);
        match (sink.feed)(obj, data).and_then(|_| (sink.process)(obj)) {
            Ok(()) => Ok(()),
            Err(e) => self.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
        }
    }

    pub(super) fn to_data_received(&self, py: Python<'_>, cb: &Py<PyAny>, data: &Bound<'_, PyBytes>) -> PyResult<()> {
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

    /// Arm the read for the current mode (a switch in progress arms it in `_on_switched`).
    fn arm_read(slf: &Bound<'_, Self>, switching: bool, bulk: bool) -> PyResult<()> {
        if switching {
            return Ok(());
        }
        if bulk {
            return Self::read_on_readiness(slf);
        }
        Self::read_with_recv(slf)
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
        LoopCore::call_soon_impl(slf.get().loop_.bind(py), &drain, Args::None, slf.get().context(py)?).map(|_| ())
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

reading_pymethods!(StreamIO);

#[pymethods]
impl StreamIO {
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
            Sink::Native(n) => Self::read_native(slf, &n),
        }
    }

    /// Start reading: a multishot recv on io_uring, else a reader callback on readiness.
    /// Completions held while paused are delivered first, by `_drain_pending`, and the read
    /// is armed only after them: a multishot recv armed beside a non-empty inbox fills the
    /// ring from a full socket at once, all of it joins the inbox, and a protocol that takes
    /// one chunk per resume (an upload consumed slower than it arrives) would see the inbox
    /// grow by a ring's worth per resume, without bound.
    fn start_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (switching, bulk) = {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.read.on || st.detached || st.conn_lost > 0 {
                return Ok(());
            }
            st.read.on = true;
            st.arm_after_drain = !st.pending.is_empty();
            if st.arm_after_drain {
                drop(st);
                return Self::schedule_drain(slf);
            }
            (st.switching, st.bulk)
        };
        Self::arm_read(slf, switching, bulk)
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
                let Some(item) = st.pending.pop_front() else {
                    // Emptied while reading: now the socket may be read (see `start_reading`).
                    if !std::mem::take(&mut st.arm_after_drain) {
                        return Ok(());
                    }
                    let (switching, bulk) = (st.switching, st.bulk);
                    drop(st);
                    return Self::arm_read(slf, switching, bulk);
                };
                (item.into_bound(py), st.sink.clone_ref(py))
            };
            if let Ok(b) = item.cast::<PyBytes>() {
                if this.tls_on(py)? {
                    // The inbox holds ciphertext: it goes through the session like any read.
                    Self::receive_tls(slf, &sink, Cipher::Slice(b.as_bytes()))?;
                    continue;
                }
                match sink {
                    Sink::None => {}
                    Sink::Data(cb) => this.to_data_received(py, &cb, b)?,
                    Sink::Buffered { get_buffer, buffer_updated } => this.feed_buffered(py, Source::Bytes(b.as_bytes()), &get_buffer, &buffer_updated)?,
                    Sink::Native(n) => this.to_native(py, &n, Received::Slice(b.as_bytes()))?,
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
        if this.tls_on(py)? {
            Self::receive_tls(slf, &sink, Cipher::Ring(r))?;
            return Self::maybe_go_bulk(slf, n);
        }
        match sink {
            Sink::None => {}
            // Straight from the ring buffers into the protocol's buffer: no `bytes` between.
            Sink::Buffered { get_buffer, buffer_updated } => this.feed_buffered(py, Source::Read(r), &get_buffer, &buffer_updated)?,
            Sink::Data(cb) => {
                let b = ring_read_bytes(py, r)?;
                this.to_data_received(py, &cb, &b)?;
            }
            Sink::Native(native) => this.to_native(py, &native, Received::Ring(r))?,
        }
        Self::maybe_go_bulk(slf, n)
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
