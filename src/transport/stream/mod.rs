//! `StreamIO`: the native I/O of one stream-socket transport (TCP or Unix), in three rooms:
//! this file (the state, construction, the asyncio attributes the Python transport mirrors),
//! `read` (every way bytes reach the protocol, and the read-order invariant) and `write` (the
//! write buffer, coalesced sends, flow control, and `detach` when the transport goes).
//!
//! The Python transport (`ringloop._streams`) subclasses asyncio's own selector transport and
//! keeps its lifecycle semantics; it is called back only on the rare edges (EOF, errors,
//! crossing a water mark, the buffer draining while someone waits for it).
//! - `conn_lost`, `eof` (write_eof asked) and `sendfile_busy` mirror asyncio's `_conn_lost`,
//!   `_eof` and `_empty_waiter is not None`: the write path checks them, so they live here.
//! - `tls` (its own room): a TLS session between the socket and the protocol.
//! - `watch_drain`: the Python side wants `_on_drained()` when the buffer empties (close with
//!   data pending, write_eof, sendfile's empty waiter). Left unset on the hot path, so a
//!   drained buffer costs no Python call.

mod accept;
mod owned;
mod read;
mod tls;
mod write;

pub use accept::NativeAccept;
pub use owned::NativeTransport;
pub use tls::TlsConfig;

use std::collections::VecDeque;
use std::os::fd::RawFd;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyClass, PyTraverseError, PyVisit};

use super::reading::ReadState;
use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::RingRead;

/// What a native protocol receives: bytes read into a buffer of the transport's, or a read
/// still in the loop's ring buffers.
pub enum Received<'a> {
    Slice(&'a [u8]),
    Ring(RingRead),
}

/// A protocol written in Rust (the HTTP connection): the transport hands it what it reads with
/// no Python call and no `bytes` object. The protocol installs itself from its
/// `connection_made` with `StreamIO::set_native_protocol`; the transport's other calls to its
/// protocol (`eof_received`, `connection_lost`, `pause_writing`, …) stay asyncio's.
pub trait NativeProtocol: PyClass {
    /// Take `data` in. No Python code may run here: the transport may still hold a buffer
    /// that Python code could need (it runs in `process`).
    fn feed(slf: &Bound<'_, Self>, data: Received<'_>) -> PyResult<()>;
    /// Act on what was fed (called right after `feed`, with nothing of the transport's held).
    fn process(slf: &Bound<'_, Self>) -> PyResult<()>;
}

/// A native protocol: the object and its type's two entry points.
struct NativeSink {
    obj: Py<PyAny>,
    feed: fn(&Bound<'_, PyAny>, Received<'_>) -> PyResult<()>,
    process: fn(&Bound<'_, PyAny>) -> PyResult<()>,
}

fn feed_as<T: NativeProtocol>(obj: &Bound<'_, PyAny>, data: Received<'_>) -> PyResult<()> {
    T::feed(obj.cast::<T>()?, data)
}

fn process_as<T: NativeProtocol>(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    T::process(obj.cast::<T>()?)
}

impl NativeSink {
    fn clone_ref(&self, py: Python<'_>) -> NativeSink {
        NativeSink { obj: self.obj.clone_ref(py), feed: self.feed, process: self.process }
    }
}

/// How reads reach the protocol, picked by `set_protocol` as asyncio does (or by a native
/// protocol, `set_native_protocol`).
enum Sink {
    None,
    Data(Py<PyAny>),
    Buffered { get_buffer: Py<PyAny>, buffer_updated: Py<PyAny> },
    Native(NativeSink),
}

impl Sink {
    fn clone_ref(&self, py: Python<'_>) -> Sink {
        match self {
            Sink::None => Sink::None,
            Sink::Data(cb) => Sink::Data(cb.clone_ref(py)),
            Sink::Buffered { get_buffer, buffer_updated } => {
                Sink::Buffered { get_buffer: get_buffer.clone_ref(py), buffer_updated: buffer_updated.clone_ref(py) }
            }
            Sink::Native(n) => Sink::Native(n.clone_ref(py)),
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
    /// Reading resumed with a non-empty inbox: the read is armed only once the drain has
    /// emptied it (see `start_reading`).
    arm_after_drain: bool,
    /// TLS on this connection (see `tls`): every read is decrypted, every write encrypted.
    tls: Option<Box<tls::TlsState>>,
    /// The context the protocol's callbacks run in (asyncio 3.15 gives each connection one):
    /// the read and write callbacks are handles in it, the end-of-iteration flush enters it.
    /// `None`: each callback runs in a copy of the context current when it was registered.
    context: Option<Py<PyAny>>,
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

impl StreamIO {
    /// Make `proto` this transport's reader (see `NativeProtocol`).
    pub fn set_native_protocol<T: NativeProtocol>(&self, py: Python<'_>, proto: Py<T>) -> PyResult<()> {
        let sink = Sink::Native(NativeSink { obj: proto.into_any(), feed: feed_as::<T>, process: process_as::<T> });
        let old = std::mem::replace(&mut self.st.borrow_mut(py)?.sink, sink);
        drop(old);
        Ok(())
    }

    /// The socket, for native protocols that ask it directly (sendfile).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether the write buffer is above its high-water mark (a native protocol's `send`
    /// waits then).
    pub fn write_blocked(&self, py: Python<'_>) -> PyResult<bool> {
        let st = self.st.borrow(py)?;
        Ok(st.size > st.high)
    }

    /// Whether nothing waits in the write buffer (a native protocol may then write to the
    /// socket itself: sendfile).
    pub fn buffer_empty(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(slf.get().st.borrow(slf.py())?.size == 0)
    }

    /// The protocol's context, if the transport was given one.
    fn context<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(self.st.borrow(py)?.context.as_ref().map(|c| c.bind(py).clone()))
    }

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
}

#[pymethods]
impl StreamIO {
    #[new]
    #[pyo3(signature = (loop_, fd, transport, context = None))]
    fn py_new(loop_: &Bound<'_, PyAny>, fd: RawFd, transport: Py<PyAny>, context: Option<Py<PyAny>>) -> PyResult<Self> {
        let py = loop_.py();
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
                arm_after_drain: false,
                tls: None,
                context: context.filter(|c| !c.is_none(py)),
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

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        if let Some(t) = &st.transport {
            visit.call(t)?;
        }
        if let Some(c) = &st.context {
            visit.call(c)?;
        }
        match &st.sink {
            Sink::None => {}
            Sink::Data(cb) => visit.call(cb)?,
            Sink::Native(n) => visit.call(&n.obj)?,
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
            (
                st.transport.take(),
                st.context.take(),
                std::mem::replace(&mut st.sink, Sink::None),
                std::mem::take(&mut st.wbuf),
                std::mem::take(&mut st.pending),
            )
        });
        drop(taken);
    }
}
