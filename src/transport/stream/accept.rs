//! `NativeAccept`: what a multishot accept's completion does for a listener whose protocol is
//! native (the HTTP server's): the connection is built here, with no Python code — the peer
//! and local addresses, `TCP_NODELAY`, a `StreamIO`, a `NativeTransport` (`owned.rs`), the
//! protocol from its factory, TLS — and counted by its `asyncio.Server`. `_streams.py`'s
//! `_start_serving` gives the loop's accept this object instead of `_on_accepted` (see
//! docs/native-accept.md for which listeners qualify).
//!
//! Where the loop has no multishot accept (epoll) or the listener is shared with other
//! processes, the same object is the listener's reader (`_on_readable`: `accept4` until
//! nothing waits). A completion that is an error goes to `fallback` (asyncio's handling of
//! accept errors, in Python: rare). A connection accepted after `stop()` is closed (nobody would serve it);
//! after `hand_over()` it is served, uncounted by the closed server.

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::owned::{NativeTransport, Owned};
use super::{StreamIO, TlsConfig};
use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;
use crate::transport::datagram::address;
use crate::transport::registry::TransportMap;

struct Acceptor {
    server: Option<Py<PyAny>>,
    stopped: bool,
}

#[pyclass(module = "ringloop._core", frozen)]
pub struct NativeAccept {
    loop_: Py<LoopCore>,
    factory: Py<PyAny>,
    fallback: Py<PyAny>,
    tls: Option<Py<TlsConfig>>,
    handshake_timeout: Option<f64>,
    server_takes_transport: bool,
    /// On readiness (`_on_readable`): the listening socket, and at most this many accepts
    /// per readiness event (asyncio's `backlog` rule).
    listener: RawFd,
    backlog: u32,
    st: GilCell<Acceptor>,
}

/// `getpeername`/`getsockname` of `fd`, as Python's socket module returns them.
fn name_of(py: Python<'_>, fd: RawFd, peer: bool) -> PyResult<Py<PyAny>> {
    // SAFETY: sockaddr_storage is plain data; zeroed is a valid empty address.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `p` points to `len` writable bytes; the call writes at most that many.
    let r = unsafe { if peer { libc::getpeername(fd, p, &mut len) } else { libc::getsockname(fd, p, &mut len) } };
    if r != 0 {
        return Ok(py.None()); // reset while in the backlog: the first read finds out
    }
    if ss.ss_family as i32 != libc::AF_UNIX {
        return address(py, &ss);
    }
    // SAFETY: the family says the storage holds a sockaddr_un.
    let un = unsafe { &*(&ss as *const libc::sockaddr_storage as *const libc::sockaddr_un) };
    let off = std::mem::size_of::<libc::sa_family_t>();
    let n = (len as usize).saturating_sub(off).min(un.sun_path.len());
    // SAFETY: `sun_path` is `c_char` storage of at least `n` bytes, read as bytes.
    let path = unsafe { std::slice::from_raw_parts(un.sun_path.as_ptr().cast::<u8>(), n) };
    if path.first() == Some(&0) {
        return Ok(PyBytes::new(py, path).into_any().unbind()); // the abstract namespace
    }
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    Ok(PyString::new(py, &String::from_utf8_lossy(&path[..end])).into_any().unbind())
}

impl NativeAccept {
    /// One accepted connection, set up; the transport (closed again if the set-up failed).
    fn set_up(slf: &Bound<'_, Self>, fd: RawFd) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let peername = name_of(py, fd, true)?;
        let sockname = name_of(py, fd, false)?;
        if peername.bind(py).is_instance_of::<PyTuple>() {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt with a valid int option value on our own fd. asyncio sets
            // TCP_NODELAY on every TCP transport; a failure is harmless (so ignored).
            unsafe {
                libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&one as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t)
            };
        }
        let loop_ = this.loop_.bind(py);
        let io = Bound::new(py, StreamIO::py_new(loop_.as_any(), fd, py.None(), None)?)?;
        let server = this.st.borrow(py)?.server.as_ref().map(|s| s.clone_ref(py));
        let mut owned = Owned::new(peername, sockname);
        owned.server_takes_transport = this.server_takes_transport;
        owned.tls = this.tls.is_some();
        owned.tls_config = this.tls.as_ref().map(|c| c.clone_ref(py).into_any());
        let transport = Bound::new(py, NativeTransport { fd, loop_: this.loop_.clone_ref(py), io: io.clone().unbind(), st: GilCell::new(owned) })?;
        io.get().st.borrow_mut(py)?.transport = Some(transport.clone().into_any().unbind());
        // As asyncio's transports: `add_reader`/`sock_*` refuse the fd while it is open.
        let transports = loop_.getattr(intern!(py, "_transports"))?;
        match transports.cast::<TransportMap>() {
            Ok(map) => map.get().insert(py, fd as i64, transport.as_any())?,
            Err(_) => transports.set_item(fd, &transport)?,
        }
        if let Some(s) = &server {
            let args = if this.server_takes_transport { PyTuple::new(py, [transport.as_any()])? } else { PyTuple::empty(py) };
            s.call_method1(py, intern!(py, "_attach"), args)?;
            transport.get().st.borrow_mut(py)?.server = server;
        }
        let r = Self::start(slf, &transport, &io);
        if let Err(e) = r {
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                return Err(e);
            }
            // asyncio's `_accept_connection2`: reported in debug mode, the connection closed.
            if loop_.call_method0(intern!(py, "get_debug"))?.is_truthy()? {
                let ctx = PyDict::new(py);
                ctx.set_item("message", "Error on transport creation for incoming connection")?;
                ctx.set_item("exception", e.into_value(py))?;
                loop_.call_method1(intern!(py, "call_exception_handler"), (ctx,))?;
            }
            transport.call_method0(intern!(py, "abort"))?;
        }
        Ok(())
    }

    fn start(slf: &Bound<'_, Self>, transport: &Bound<'_, NativeTransport>, io: &Bound<'_, StreamIO>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let protocol = this.factory.call0(py)?;
        transport.get().st.borrow_mut(py)?.protocol = Some(protocol.clone_ref(py));
        // Reads go to `data_received` (or a BufferedProtocol's buffer) unless the protocol
        // installs itself natively from `connection_made`, as the HTTP connection does.
        io.call_method1(intern!(py, "set_protocol"), (&protocol,))?;
        // Synchronously, where asyncio schedules it: nothing can happen on a connection no
        // read has started on, and the protocol is set up before this completion returns.
        protocol.call_method1(py, intern!(py, "connection_made"), (transport,))?;
        if let Some(cfg) = &this.tls {
            io.call_method1(intern!(py, "enable_tls"), (cfg,))?;
            if let Some(t) = this.handshake_timeout {
                let cb = transport.getattr(intern!(py, "_tls_timeout"))?;
                let timer = this.loop_.bind(py).call_method1(intern!(py, "call_later"), (t, cb))?;
                transport.get().st.borrow_mut(py)?.tls_timer = Some(timer.unbind());
            }
        }
        if !transport.get().closing(py)? {
            io.call_method0(intern!(py, "start_reading"))?;
        }
        Ok(())
    }
}

#[pymethods]
impl NativeAccept {
    #[new]
    #[pyo3(signature = (loop_, factory, server, fallback, tls = None, handshake_timeout = None, server_takes_transport = false, listener = -1, backlog = 100))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, named at the call
    fn py_new(
        loop_: &Bound<'_, PyAny>,
        factory: Py<PyAny>,
        server: Option<Py<PyAny>>,
        fallback: Py<PyAny>,
        tls: Option<Py<TlsConfig>>,
        handshake_timeout: Option<f64>,
        server_takes_transport: bool,
        listener: RawFd,
        backlog: u32,
    ) -> PyResult<Self> {
        Ok(NativeAccept {
            loop_: loop_.cast::<LoopCore>()?.clone().unbind(),
            factory,
            fallback,
            tls,
            handshake_timeout: handshake_timeout.filter(|t| *t > 0.0),
            server_takes_transport,
            listener,
            backlog: backlog.max(1),
            st: GilCell::new(Acceptor { server, stopped: false }),
        })
    }

    /// The accept's completion: a new connection's fd, or -errno.
    fn __call__(slf: &Bound<'_, Self>, res: i32) -> PyResult<()> {
        let py = slf.py();
        if res < 0 {
            return slf.get().fallback.call1(py, (res,)).map(drop);
        }
        if slf.get().st.borrow(py)?.stopped {
            // SAFETY: `res` is a connection the kernel just accepted for us; nobody else has it.
            unsafe { libc::close(res) };
            return Ok(());
        }
        Self::set_up(slf, res)
    }

    /// The listening socket's reader (epoll, or a listener shared with other processes):
    /// accept what is waiting, as asyncio's `_accept_connection` does, each connection set up
    /// as a completion's. An error other than "nothing more" goes to `fallback` as -errno.
    fn _on_readable(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        for _ in 0..this.backlog {
            if this.st.borrow(py)?.stopped {
                return Ok(());
            }
            // SAFETY: accept4 with null address arguments on the listening socket we were
            // given; the fd it returns is ours.
            let fd = unsafe { libc::accept4(this.listener, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
            if fd >= 0 {
                Self::set_up(slf, fd)?;
                continue;
            }
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            match errno {
                libc::EINTR | libc::ECONNABORTED => continue,
                libc::EAGAIN => return Ok(()),
                _ => return this.fallback.call1(py, (-errno,)).map(drop),
            }
        }
        Ok(())
    }

    /// Serving stopped: connections still delivered are closed.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.st.borrow_mut(py)?.stopped = true;
        Ok(())
    }

    /// Serving stopped on a listener handed to a successor: connections still delivered are
    /// served, counted by no server (it is closed).
    fn hand_over(&self, py: Python<'_>) -> PyResult<()> {
        self.st.borrow_mut(py)?.server = None;
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        visit.call(&self.factory)?;
        visit.call(&self.fallback)?;
        visit.call(&self.tls)?;
        if let Some(st) = self.st.try_borrow_unattached() {
            visit.call(&st.server)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| st.server.take());
        drop(taken);
    }
}
