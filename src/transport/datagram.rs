//! `DatagramIO`: the native I/O of one UDP transport (IPv4 or IPv6).
//!
//! Like `stream::StreamIO`, it takes the per-datagram work and leaves the lifecycle to
//! asyncio's own transport class (`ringloop._datagrams` subclasses
//! `_SelectorDatagramTransport`):
//! - **reads on io_uring**: one multishot `recvmsg` per transport into the loop's datagram
//!   buffer ring; each completion is one datagram and its sender, delivered by `_on_datagram`
//!   (no syscall per datagram). An error ends the multishot: it goes to `error_received` and
//!   the loop re-arms, so reading goes on as asyncio's reader does.
//! - **reads on epoll**: `_on_readable` is the socket's reader callback, one `recvfrom` into a
//!   per-thread scratch buffer.
//! - Either way the address is built as Python's socket module builds it (`(host, port)`, or
//!   `(host, port, flowinfo, scope_id)` for IPv6), then `protocol.datagram_received(data,
//!   addr)`; an `OSError` goes to `protocol.error_received`, as in asyncio.
//! - `send_fast` is `sendto`'s common case — nothing buffered, a numeric address or a
//!   connected socket — sent at once. It answers `False` whenever asyncio's own `sendto` must
//!   decide (a host name, a full kernel buffer, anything unusual), and the Python side then
//!   calls it, so buffering, flow control and error reporting stay asyncio's.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::buffers::{is_bytes_like, with_scratch, View, MAX_READ};
use super::reading::{reading_pymethods, ReadState};
use crate::errors::os_error;
use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::{recvmsg_parts, OpKind};

struct DatagramState {
    transport: Option<Py<PyAny>>,
    datagram_received: Option<Py<PyAny>>,
    error_received: Option<Py<PyAny>>,
    /// Reading is on, and through what (io_uring: the multishot recvmsg).
    read: ReadState,
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct DatagramIO {
    fd: RawFd,
    loop_: Py<LoopCore>,
    st: GilCell<DatagramState>,
}

/// The address of a received datagram, as `socket.recvfrom` returns it.
pub(crate) fn address(py: Python<'_>, sa: &libc::sockaddr_storage) -> PyResult<Py<PyAny>> {
    match sa.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(sa as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok(PyTuple::new(py, [ip.to_string().into_pyobject(py)?.into_any(), u16::from_be(a.sin_port).into_pyobject(py)?.into_any()])?.into_any().unbind())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(sa as *const libc::sockaddr_storage as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let mut host = ip.to_string();
            if a.sin6_scope_id != 0 {
                // Python's getnameinfo(NI_NUMERICHOST) spells a scoped address "addr%ifname".
                let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
                // SAFETY: `name` has IF_NAMESIZE bytes, as if_indextoname requires.
                let p = unsafe { libc::if_indextoname(a.sin6_scope_id, name.as_mut_ptr()) };
                if !p.is_null() {
                    // SAFETY: if_indextoname wrote a NUL-terminated name into `name`.
                    let n = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
                    host = format!("{host}%{}", n.to_string_lossy());
                }
            }
            Ok(PyTuple::new(
                py,
                [
                    host.into_pyobject(py)?.into_any(),
                    u16::from_be(a.sin6_port).into_pyobject(py)?.into_any(),
                    u32::from_be(a.sin6_flowinfo).into_pyobject(py)?.into_any(),
                    a.sin6_scope_id.into_pyobject(py)?.into_any(),
                ],
            )?
            .into_any()
            .unbind())
        }
        _ => Ok(py.None()),
    }
}

/// A numeric `(host, port[, flowinfo, scope_id])` as a sockaddr, or `None` when asyncio's
/// path must handle it (host names, odd tuples).
fn parse_address(addr: &Bound<'_, PyAny>) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    let t = addr.cast::<PyTuple>().ok()?;
    if !(2..=4).contains(&t.len()) {
        return None;
    }
    let host = t.get_item(0).ok()?;
    let host = host.cast::<PyString>().ok()?.to_str().ok()?.to_owned();
    let port: u16 = t.get_item(1).ok()?.extract().ok()?;
    // SAFETY: sockaddr_storage is plain data; zeroed is a valid empty address.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    if t.len() == 2 {
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage as *mut libc::sockaddr_in) };
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = port.to_be();
            a.sin_addr.s_addr = u32::from(ip).to_be();
            return Some((ss, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t));
        }
    }
    if host.contains('%') {
        return None; // a scope name: Python resolves it
    }
    let ip = host.parse::<Ipv6Addr>().ok()?;
    let flow: u32 = if t.len() > 2 { t.get_item(2).ok()?.extract().ok()? } else { 0 };
    let scope: u32 = if t.len() > 3 { t.get_item(3).ok()?.extract().ok()? } else { 0 };
    // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
    let a = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6) };
    a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    a.sin6_port = port.to_be();
    a.sin6_flowinfo = flow.to_be();
    a.sin6_addr.s6_addr = ip.octets();
    a.sin6_scope_id = scope;
    Some((ss, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t))
}

/// A received datagram's payload as `bytes`, the sender's address, and whether the kernel
/// truncated it; `None` if the buffer does not parse.
fn datagram_parts(py: Python<'_>, buf: &[u8]) -> Option<(Py<PyBytes>, libc::sockaddr_storage, bool)> {
    let (name, payload, truncated) = recvmsg_parts(buf)?;
    // SAFETY: sockaddr_storage is plain data; all-zero is valid (family AF_UNSPEC).
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = name.len().min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: both regions are at least `n` bytes and do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), (&mut sa as *mut libc::sockaddr_storage).cast::<u8>(), n) };
    Some((PyBytes::new(py, payload).unbind(), sa, truncated))
}

/// (transport, `datagram_received`, `error_received`).
type Callbacks = (Py<PyAny>, Py<PyAny>, Py<PyAny>);

impl DatagramIO {
    fn callbacks(&self, py: Python<'_>) -> PyResult<Option<Callbacks>> {
        let st = self.st.borrow(py)?;
        Ok(match (&st.transport, &st.datagram_received, &st.error_received) {
            (Some(t), Some(d), Some(e)) => Some((t.clone_ref(py), d.clone_ref(py), e.clone_ref(py))),
            _ => None,
        })
    }
}

reading_pymethods!(DatagramIO);

#[pymethods]
impl DatagramIO {
    #[new]
    fn py_new(loop_: &Bound<'_, PyAny>, fd: RawFd, transport: Py<PyAny>) -> PyResult<Self> {
        let loop_ = loop_.cast::<LoopCore>()?.clone().unbind();
        let st = DatagramState { transport: Some(transport), datagram_received: None, error_received: None, read: ReadState::default() };
        Ok(DatagramIO { fd, loop_, st: GilCell::new(st) })
    }

    /// Start delivering datagrams: a multishot recvmsg on io_uring, else a reader callback.
    fn start_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            if st.read.on || st.transport.is_none() {
                return Ok(());
            }
            st.read.on = true;
        }
        let on_datagram = slf.getattr(intern!(py, "_on_datagram"))?.unbind();
        let token = LoopCore::read_start(this.loop_.bind(py), this.fd, OpKind::RecvMsg, on_datagram, slf.as_any(), None)?;
        this.st.borrow_mut(py)?.read.token = token;
        Ok(())
    }

    /// One completion of the multishot recvmsg: a datagram (`n > 0`, taken from the loop's
    /// ring, see `LoopCore::take_read`) or `-errno`.
    fn _on_datagram(&self, py: Python<'_>, item: i64) -> PyResult<()> {
        // Taken first, whatever happens next: its buffer must go back to the ring.
        let datagram = if item > 0 {
            match LoopCore::take_read(self.loop_.bind(py), item)? {
                Some(read) => read.with_single(|buf| datagram_parts(py, buf)),
                None => return Ok(()),
            }
        } else {
            None
        };
        let Some((transport, received, error)) = self.callbacks(py)? else { return Ok(()) };
        let lost: u64 = transport.getattr(py, intern!(py, "_conn_lost"))?.extract(py)?;
        if lost > 0 || !self.st.borrow(py)?.read.on {
            return Ok(());
        }
        match datagram {
            Some((data, sa, false)) => {
                let addr = address(py, &sa)?;
                received.call1(py, (data, addr))?;
            }
            Some((_, _, true)) => {
                // Cannot happen with IPv4/IPv6 payloads (a buffer holds 65,507 bytes); never
                // deliver a cut datagram as if whole.
                let e = std::io::Error::from_raw_os_error(libc::EMSGSIZE);
                error.call1(py, (os_error(e).into_value(py),))?;
            }
            None => {
                let e = std::io::Error::from_raw_os_error(-item as i32);
                error.call1(py, (os_error(e).into_value(py),))?;
            }
        }
        Ok(())
    }

    fn set_protocol(&self, py: Python<'_>, protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = protocol.getattr(intern!(py, "datagram_received"))?.unbind();
        let e = protocol.getattr(intern!(py, "error_received"))?.unbind();
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            (st.datagram_received.replace(d), st.error_received.replace(e))
        };
        drop(old);
        Ok(())
    }

    /// The socket's reader callback: one datagram (asyncio's `_read_ready`).
    fn _on_readable(&self, py: Python<'_>) -> PyResult<()> {
        let Some((transport, received, error)) = self.callbacks(py)? else { return Ok(()) };
        let lost: u64 = transport.getattr(py, intern!(py, "_conn_lost"))?.extract(py)?;
        if lost > 0 {
            return Ok(());
        }
        // SAFETY: sockaddr_storage is plain data; zeroed is valid.
        let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let res = with_scratch(|s| -> Result<Py<PyBytes>, std::io::Error> {
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: the scratch buffer and the address storage are ours and large enough.
            let n = unsafe {
                libc::recvfrom(self.fd, s.as_mut_ptr().cast(), MAX_READ, 0, &mut sa as *mut _ as *mut libc::sockaddr, &mut len)
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(PyBytes::new(py, &s[..n as usize]).unbind())
        });
        match res {
            Ok(data) => {
                let addr = address(py, &sa)?;
                received.call1(py, (data, addr))?;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => {}
            Err(e) => {
                error.call1(py, (os_error(e).into_value(py),))?;
            }
        }
        Ok(())
    }

    /// Send now if it is the simple case (see the module docs). `True`: handled (sent, or an
    /// OSError handed to `error_received`); `False`: asyncio's `sendto` must take it.
    #[pyo3(signature = (data, addr=None))]
    fn send_fast(&self, py: Python<'_>, data: &Bound<'_, PyAny>, addr: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        if !is_bytes_like(data) {
            return Ok(false);
        }
        let target = match addr {
            None => None,
            Some(a) => match parse_address(a) {
                Some(t) => Some(t),
                None => return Ok(false),
            },
        };
        let Ok(view) = View::new(data, ffi::PyBUF_SIMPLE) else { return Ok(false) };
        if view.is_empty() {
            return Ok(false); // asyncio decides what an empty datagram means on this version
        }
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        let n = match &target {
            // SAFETY: `view` exports `len` readable bytes while held.
            None => unsafe { libc::send(self.fd, view.ptr().cast(), view.len(), flags) },
            // SAFETY: as above; the sockaddr is ours with its true length.
            Some((ss, sl)) => unsafe { libc::sendto(self.fd, view.ptr().cast(), view.len(), flags, ss as *const _ as *const libc::sockaddr, *sl) },
        };
        let err = (n < 0).then(std::io::Error::last_os_error);
        drop(view);
        match err {
            None => Ok(true),
            Some(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => Ok(false),
            Some(e) => {
                // asyncio calls error_received from sendto itself: its exceptions propagate.
                if let Some((_, _, error)) = self.callbacks(py)? {
                    error.call1(py, (os_error(e).into_value(py),))?;
                }
                Ok(true)
            }
        }
    }

    /// The transport is gone: drop the references that form a cycle through us.
    fn detach(&self, py: Python<'_>) -> PyResult<()> {
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            (st.transport.take(), st.datagram_received.take(), st.error_received.take())
        };
        drop(old);
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        visit.call(&st.transport)?;
        visit.call(&st.datagram_received)?;
        visit.call(&st.error_received)?;
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| (st.transport.take(), st.datagram_received.take(), st.error_received.take()));
        drop(taken);
    }
}
