//! `NativeTransport`: a stream transport with no Python code in it, for connections accepted
//! natively (`accept.rs`) whose protocol is native too (the HTTP server's connection).
//!
//! `StreamTransport` (`ringloop._streams`) is asyncio's selector transport with native I/O:
//! its set-up (a `socket.socket`, asyncio's `__init__`, a task per accept) is Python, run once
//! per connection. This type is the same state machine for the one kind of protocol that needs
//! none of asyncio's Python around it: it owns the fd, its `StreamIO` does every read and write,
//! and it implements, in Rust, the edges `StreamIO` calls back (`_read_ready__on_eof`,
//! `_on_drained`, `_fatal_error`, `_write_error`, `_tls_failed`, `_maybe_pause_protocol`, …) and
//! the transport methods the protocol calls (`close`, `abort`, `pause_reading`, `write_eof`, …),
//! with asyncio's semantics for each (`selector_events._SelectorSocketTransport`):
//! - `close` stops reading, sends TLS close_notify, and calls `connection_lost` once the write
//!   buffer is empty (at once, in the next iteration, if it already is);
//! - `abort` and fatal errors drop the buffer and call `connection_lost` in the next iteration;
//! - after `connection_lost` the fd is closed and the `asyncio.Server` the connection was
//!   counted by is told (`_detach`), which is what its `wait_closed()` waits for.
//!
//! It is known to the loop as asyncio's transports are (`loop._transports[fd]`, set by
//! `accept.rs`), so `add_reader` and `sock_*` on its fd are refused while it is open.
//! `get_extra_info` answers asyncio's keys: `peername`/`sockname` (made at accept),
//! `socket` (an `asyncio.trsock.TransportSocket` over the owned fd, made when first asked
//! and detached before the fd is closed: it never closes the fd itself), and under TLS
//! `sslcontext` (the listener's `_core.TlsConfig`) and `ssl_object`/`peercert`/`cipher`/
//! `compression` (`ringloop._tls_info`, as `StreamTransport`'s); other keys, the default.

use std::os::fd::RawFd;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::StreamIO;
use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;
use crate::eventloop::handle::Args;

pub(super) struct Owned {
    pub(super) protocol: Option<Py<PyAny>>,
    /// The `asyncio.Server` this connection is counted by (`_attach`ed), until it is lost.
    pub(super) server: Option<Py<PyAny>>,
    /// `Server._attach`/`_detach` take the transport (3.13+).
    pub(super) server_takes_transport: bool,
    pub(super) peername: Py<PyAny>,
    pub(super) sockname: Py<PyAny>,
    closing: bool,
    /// `connection_lost` was called or is scheduled.
    lost: bool,
    paused: bool,
    protocol_paused: bool,
    pub(super) tls: bool,
    /// The listener's `_core.TlsConfig` (`get_extra_info("sslcontext")`).
    pub(super) tls_config: Option<Py<PyAny>>,
    /// `get_extra_info("socket")`: the `socket.socket` over `fd` and its `TransportSocket`,
    /// made when first asked; the socket is detached before the fd is closed.
    sock: Option<(Py<PyAny>, Py<PyAny>)>,
    pub(super) tls_timer: Option<Py<PyAny>>,
    /// Futures `_drained()` handed out: resolved when the protocol may write again.
    drain_waiters: Vec<Py<PyAny>>,
    /// Futures `_empty()` handed out: resolved when the write buffer is empty (or lost).
    empty_waiters: Vec<Py<PyAny>>,
    fd_open: bool,
}

impl Owned {
    pub(super) fn new(peername: Py<PyAny>, sockname: Py<PyAny>) -> Owned {
        Owned {
            protocol: None,
            server: None,
            server_takes_transport: false,
            peername,
            sockname,
            closing: false,
            lost: false,
            paused: false,
            protocol_paused: false,
            tls: false,
            tls_config: None,
            sock: None,
            tls_timer: None,
            drain_waiters: Vec::new(),
            empty_waiters: Vec::new(),
            fd_open: true,
        }
    }
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct NativeTransport {
    pub(super) fd: RawFd,
    pub(super) loop_: Py<LoopCore>,
    pub(super) io: Py<StreamIO>,
    pub(super) st: GilCell<Owned>,
}

impl NativeTransport {
    pub(super) fn closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.closing)
    }

    fn protocol(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.st.borrow(py)?.protocol.as_ref().map(|p| p.clone_ref(py)))
    }

    fn call_soon(slf: &Bound<'_, Self>, method: &Bound<'_, PyAny>, args: Args) -> PyResult<()> {
        LoopCore::call_soon_impl(slf.get().loop_.bind(slf.py()), method, args, None).map(drop)
    }

    /// asyncio's `_force_close`: drop what is unsent, `connection_lost(exc)` next iteration.
    fn force_close(slf: &Bound<'_, Self>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let io = this.io.bind(py);
        if io.get().st.borrow(py)?.conn_lost > 0 {
            return Ok(());
        }
        io.call_method0(intern!(py, "clear_writes"))?;
        let was_closing = std::mem::replace(&mut this.st.borrow_mut(py)?.closing, true);
        if !was_closing {
            io.call_method0(intern!(py, "stop_reading"))?;
        }
        io.get().st.borrow_mut(py)?.conn_lost += 1;
        let exc = exc.unwrap_or_else(|| py.None());
        Self::call_soon(slf, &slf.getattr(intern!(py, "_call_connection_lost"))?, Args::One(exc))
    }

    /// The protocol's `eof_received()`: its answer, or `None` when it raised (the transport
    /// has then failed, as in asyncio).
    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<Option<bool>> {
        let py = slf.py();
        let Some(p) = slf.get().protocol(py)? else { return Ok(Some(false)) };
        match p.call_method0(py, intern!(py, "eof_received")).and_then(|r| r.is_truthy(py)) {
            Ok(keep) => Ok(Some(keep)),
            Err(e) if is_fatal(py, &e) => Err(e),
            Err(e) => {
                Self::_fatal_error(slf, e.into_value(py).into_bound(py).into_any(), "Fatal error: protocol.eof_received() call failed.")?;
                Ok(None)
            }
        }
    }

    fn resolve_drain_waiters(&self, py: Python<'_>) -> PyResult<()> {
        let waiters = std::mem::take(&mut self.st.borrow_mut(py)?.drain_waiters);
        resolve(py, waiters)
    }

    fn resolve_empty_waiters(&self, py: Python<'_>) -> PyResult<()> {
        let waiters = std::mem::take(&mut self.st.borrow_mut(py)?.empty_waiters);
        resolve(py, waiters)
    }

    fn close_fd(&self, py: Python<'_>) -> PyResult<()> {
        let (open, sock) = {
            let mut st = self.st.borrow_mut(py)?;
            (std::mem::replace(&mut st.fd_open, false), st.sock.take())
        };
        if let Some((sock, _)) = sock {
            // The fd is closed here, once: the socket object handed out lets go of it first
            // (its `fileno()` is then -1, as a closed asyncio transport's socket's is).
            sock.call_method0(py, intern!(py, "detach"))?;
        }
        if open {
            // SAFETY: the fd is this transport's own (accepted for it), closed exactly once:
            // `fd_open` is cleared under the borrow first.
            unsafe { libc::close(self.fd) };
        }
        Ok(())
    }
}

impl NativeTransport {
    /// A `TransportSocket` over the owned fd, kept (and the same object at each call).
    fn socket(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let sock = py.import(intern!(py, "socket"))?.getattr(intern!(py, "socket"))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "fileno"), self.fd)?;
        let sock = sock.call((), Some(&kwargs))?;
        // As an accepted socket of asyncio's: non-blocking, timeout 0.0.
        sock.call_method1(intern!(py, "setblocking"), (false,))?;
        let ts = py.import(intern!(py, "asyncio.trsock"))?.getattr(intern!(py, "TransportSocket"))?.call1((&sock,))?;
        self.st.borrow_mut(py)?.sock = Some((sock.unbind(), ts.clone().unbind()));
        Ok(ts.unbind())
    }
}

/// Each future not done yet gets `None`.
fn resolve(py: Python<'_>, waiters: Vec<Py<PyAny>>) -> PyResult<()> {
    for w in waiters {
        let w = w.bind(py);
        if !w.call_method0(intern!(py, "done"))?.is_truthy()? {
            w.call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
    }
    Ok(())
}

fn is_fatal(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py)
}

fn tls_log(py: Python<'_>, message: String) -> PyResult<()> {
    let log = py.import(intern!(py, "logging"))?.call_method1(intern!(py, "getLogger"), ("ringloop.server.tls",))?;
    log.call_method1(intern!(py, "debug"), (message,)).map(drop)
}

impl NativeTransport {
    /// `(peername, sockname)` as made at accept, for the HTTP connection's scope, without a
    /// `get_extra_info` call through Python per connection.
    pub(crate) fn names(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let st = self.st.borrow(py)?;
        Ok((st.peername.clone_ref(py), st.sockname.clone_ref(py)))
    }
}

#[pymethods]
impl NativeTransport {
    #[getter]
    fn _io(&self, py: Python<'_>) -> Py<StreamIO> {
        self.io.clone_ref(py)
    }

    #[pyo3(signature = (name, default = None))]
    fn get_extra_info(&self, py: Python<'_>, name: &str, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let default = || default.unwrap_or_else(|| py.None());
        let st = self.st.borrow(py)?;
        let tls = st.tls;
        match name {
            "peername" => return Ok(st.peername.clone_ref(py)),
            "sockname" => return Ok(st.sockname.clone_ref(py)),
            "sslcontext" if tls => return Ok(st.tls_config.as_ref().map(|c| c.clone_ref(py)).unwrap_or_else(default)),
            "socket" => {
                if let Some((_, ts)) = &st.sock {
                    return Ok(ts.clone_ref(py));
                }
                if !st.fd_open {
                    return Ok(default()); // asyncio's is closed; there is no fd to show
                }
            }
            "ssl_object" | "peercert" | "cipher" | "compression" if tls => {}
            _ => return Ok(default()),
        }
        drop(st);
        if name == "socket" {
            return self.socket(py);
        }
        let value = py.import(intern!(py, "ringloop._tls_info"))?.call_method1(intern!(py, "extra_info"), (self.io.bind(py), name))?;
        Ok(if value.is_none() { default() } else { value.unbind() })
    }

    fn get_protocol(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.protocol(py)?.unwrap_or_else(|| py.None()))
    }

    fn is_closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.closing)
    }

    fn is_reading(&self, py: Python<'_>) -> PyResult<bool> {
        let st = self.st.borrow(py)?;
        Ok(!st.paused && !st.closing)
    }

    fn pause_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.paused || st.closing {
                return Ok(());
            }
            st.paused = true;
        }
        slf.get().io.bind(py).call_method0(intern!(py, "stop_reading")).map(drop)
    }

    fn resume_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if !st.paused || st.closing {
                return Ok(());
            }
            st.paused = false;
        }
        slf.get().io.bind(py).call_method0(intern!(py, "start_reading")).map(drop)
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.io.get().st.borrow(py)?.size)
    }

    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.io.bind(py).call_method1(intern!(py, "write"), (data,)).map(drop)
    }

    /// As `StreamTransport`'s (asyncio's selector transport), with or without TLS: an error
    /// answer then half-closes TCP and reads what the client still sends, so a client still
    /// sending its body gets to read the answer instead of a reset.
    fn can_write_eof(&self) -> bool {
        true
    }

    /// asyncio's `write_eof`: shut the write side once the buffer is out.
    fn write_eof(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if this.st.borrow(py)?.closing {
            return Ok(());
        }
        let pending = {
            let mut io = this.io.get().st.borrow_mut(py)?;
            if io.eof {
                return Ok(());
            }
            io.eof = true;
            if io.size > 0 {
                io.watch_drain = true;
            }
            io.size > 0
        };
        if !pending {
            // SAFETY: shutdown(2) on our own open fd; an error (the peer is gone) is the
            // next read's or write's to report.
            unsafe { libc::shutdown(this.fd, libc::SHUT_WR) };
        }
        Ok(())
    }

    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let tls = {
            let mut st = this.st.borrow_mut(py)?;
            if st.closing {
                return Ok(());
            }
            st.closing = true;
            st.tls
        };
        let io = this.io.bind(py);
        io.call_method0(intern!(py, "stop_reading"))?;
        if tls {
            io.call_method0(intern!(py, "tls_close"))?; // close_notify, ahead of the close
        }
        let empty = {
            let mut s = io.get().st.borrow_mut(py)?;
            if s.size == 0 {
                s.conn_lost += 1;
            } else {
                s.watch_drain = true; // `_on_drained` ends it
            }
            s.size == 0
        };
        if empty {
            Self::call_soon(slf, &slf.getattr(intern!(py, "_call_connection_lost"))?, Args::One(py.None()))?;
        }
        Ok(())
    }

    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::force_close(slf, None)
    }

    /// A future resolved once the protocol may write again, or `None` if it may now (the
    /// read-and-write `loop.sendfile` of a native transport waits on it).
    fn _drained(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        let st = this.st.borrow(py)?;
        if !st.protocol_paused || st.lost {
            return Ok(None);
        }
        drop(st);
        let fut = this.loop_.bind(py).call_method0(intern!(py, "create_future"))?.unbind();
        this.st.borrow_mut(py)?.drain_waiters.push(fut.clone_ref(py));
        Ok(Some(fut))
    }

    /// True under TLS (`loop.sendfile` then reads and encrypts; in the clear it is zero-copy).
    #[getter]
    fn _tls(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.tls)
    }

    /// A future resolved once the write buffer is empty (or the connection lost), or `None`
    /// if it is now: asyncio's `_make_empty_waiter`, for the zero-copy `loop.sendfile`.
    fn _empty(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        if this.st.borrow(py)?.lost || this.io.get().st.borrow(py)?.size == 0 {
            return Ok(None);
        }
        let fut = this.loop_.bind(py).call_method0(intern!(py, "create_future"))?.unbind();
        this.st.borrow_mut(py)?.empty_waiters.push(fut.clone_ref(py));
        this.io.get().st.borrow_mut(py)?.watch_drain = true; // `_on_drained` resolves it
        Ok(Some(fut))
    }

    // -- what StreamIO calls back -------------------------------------------------------------

    fn _fatal_error(slf: &Bound<'_, Self>, exc: Bound<'_, PyAny>, message: &str) -> PyResult<()> {
        let py = slf.py();
        if !exc.is_instance_of::<PyOSError>() {
            let ctx = PyDict::new(py);
            ctx.set_item("message", message)?;
            ctx.set_item("exception", &exc)?;
            ctx.set_item("transport", slf)?;
            ctx.set_item("protocol", slf.get().protocol(py)?)?;
            slf.get().loop_.bind(py).call_method1(intern!(py, "call_exception_handler"), (ctx,))?;
        }
        Self::force_close(slf, Some(exc.unbind()))
    }

    fn _write_error(slf: &Bound<'_, Self>, exc: Bound<'_, PyAny>) -> PyResult<()> {
        Self::_fatal_error(slf, exc, "Fatal write error on socket transport")
    }

    #[pyo3(name = "_read_ready__on_eof")]
    fn read_ready_on_eof(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        match Self::eof_received(slf)? {
            None => Ok(()),
            Some(true) => slf.get().io.bind(py).call_method0(intern!(py, "stop_reading")).map(drop),
            Some(false) => Self::close(slf),
        }
    }

    fn _on_drained(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.resolve_empty_waiters(py)?;
        if this.st.borrow(py)?.closing {
            this.io.get().st.borrow_mut(py)?.conn_lost += 1;
            return Self::_call_connection_lost(slf, py.None().into_bound(py));
        }
        if this.io.get().st.borrow(py)?.eof {
            // SAFETY: shutdown(2) on our own open fd (not closing, so not closed yet).
            unsafe { libc::shutdown(this.fd, libc::SHUT_WR) };
        }
        Ok(())
    }

    fn _maybe_pause_protocol(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let io = this.io.get().st.borrow(py)?;
            if io.size <= io.high {
                return Ok(());
            }
        }
        let pause = !std::mem::replace(&mut this.st.borrow_mut(py)?.protocol_paused, true);
        this.io.get().st.borrow_mut(py)?.pause_signalled = true;
        if let (true, Some(p)) = (pause, this.protocol(py)?) {
            p.call_method0(py, intern!(py, "pause_writing"))?;
        }
        Ok(())
    }

    fn _maybe_resume_protocol(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let low = {
            let io = this.io.get().st.borrow(py)?;
            io.size <= io.low
        };
        let resume = low && std::mem::replace(&mut this.st.borrow_mut(py)?.protocol_paused, false);
        if resume {
            if let Some(p) = this.protocol(py)? {
                p.call_method0(py, intern!(py, "resume_writing"))?;
            }
            this.resolve_drain_waiters(py)?;
        }
        Ok(())
    }

    fn _tls_failed(slf: &Bound<'_, Self>, reason: String) -> PyResult<()> {
        let py = slf.py();
        tls_log(py, format!("TLS error from {}: {reason}", slf.get().st.borrow(py)?.peername.bind(py).repr()?))?;
        Self::close(slf)
    }

    fn _tls_peer_closed(slf: &Bound<'_, Self>) -> PyResult<()> {
        // Only a non-native protocol is told (see `tls.rs`); this transport has a native one.
        Self::close(slf)
    }

    /// The handshake timer (`--timeout-request-head`): a TLS slowloris is cut.
    fn _tls_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.st.borrow_mut(py)?.tls_timer = None;
        let handshaking = this.io.bind(py).getattr(intern!(py, "tls_handshaking"))?.is_truthy()?;
        if handshaking && !this.st.borrow(py)?.closing {
            tls_log(py, format!("TLS handshake timed out: {}", this.st.borrow(py)?.peername.bind(py).repr()?))?;
            Self::force_close(slf, None)?;
        }
        Ok(())
    }

    /// The end: the protocol's `connection_lost`, the fd closed, the server told.
    fn _call_connection_lost(slf: &Bound<'_, Self>, exc: Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (protocol, server, takes, timer) = {
            let mut st = this.st.borrow_mut(py)?;
            if st.lost {
                return Ok(());
            }
            st.lost = true;
            (st.protocol.take(), st.server.take(), st.server_takes_transport, st.tls_timer.take())
        };
        let io = this.io.bind(py);
        // Before the fd closes: an in-flight recv holds the file.
        io.call_method0(intern!(py, "stop_reading"))?;
        if let Some(t) = timer {
            t.call_method0(py, intern!(py, "cancel"))?;
        }
        let r = match &protocol {
            Some(p) => p.call_method1(py, intern!(py, "connection_lost"), (&exc,)).map(drop),
            None => Ok(()),
        };
        io.call_method0(intern!(py, "detach"))?;
        this.close_fd(py)?;
        this.resolve_drain_waiters(py)?;
        this.resolve_empty_waiters(py)?;
        if let Some(s) = server {
            let args = if takes { PyTuple::new(py, [slf.as_any()])? } else { PyTuple::empty(py) };
            s.call_method1(py, intern!(py, "_detach"), args)?;
        }
        drop(protocol);
        r
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        visit.call(&self.io)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        visit.call(&st.protocol)?;
        visit.call(&st.server)?;
        visit.call(&st.tls_timer)?;
        visit.call(&st.tls_config)?;
        for w in st.drain_waiters.iter().chain(&st.empty_waiters) {
            visit.call(w)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| {
            let waiters = (std::mem::take(&mut st.drain_waiters), std::mem::take(&mut st.empty_waiters));
            (st.protocol.take(), st.server.take(), st.tls_timer.take(), waiters)
        });
        drop(taken);
    }
}

impl Drop for NativeTransport {
    fn drop(&mut self) {
        // A transport collected unclosed (its loop closed under it): the fd goes with it,
        // closed by the socket object when one was handed out (it may outlive this), else here.
        if let Some(st) = self.st.try_borrow_mut_unattached() {
            if st.fd_open && st.sock.is_none() {
                // SAFETY: the fd is ours and still open (`fd_open`); nothing else closes it.
                unsafe { libc::close(self.fd) };
            }
        }
    }
}
