//! ASGI 3 over `HttpConn`: the `http` scope, and the `receive`/`send` callables.
//!
//! `receive()` and `send()` return awaitables that are usually already done: `send` returns
//! one shared, finished future (awaiting it returns at once, with no allocation) unless the
//! transport's buffer is above its high-water mark, and `receive` a finished future holding
//! its message unless the body has not arrived yet. A coroutine awaiting a finished future
//! does not suspend, so a handler that needs no other I/O runs to its end inside the request's
//! first task step (see `conn`). The cycle itself — body in, response out — is `cycle`'s;
//! messages and errors follow the spec (2.4) with uvicorn's wording.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::conn::HttpConn;
use super::cycle::{self, current, disconnect, ready, ClientDisconnected, Cycle, Got};
use super::request::{self, HeadCopy};
use super::scope::{ConnScope, Origin};
use super::stream::InFlight;

/// The scope and the cycle for the request `head` (after `conn` released its borrow).
pub(crate) fn request<'py>(conn: &Bound<'py, HttpConn>, head: &HeadCopy, id: u64) -> PyResult<(Bound<'py, PyDict>, Cycle)> {
    let py = conn.py();
    let this = conn.get();
    let server = this.server.get();
    let (client, local, trusted, base) = {
        let mut st = this.st.borrow_mut(py)?;
        (st.client.clone_ref(py), st.local.clone_ref(py), st.peer_trusted, st.scope.take())
    };
    let (mut client, mut scheme) = (client, server.scheme.clone_ref(py));
    if trusted {
        if let Some(check) = &server.proxy_trusted {
            let (c, s) = request::forwarded(py, head, check.bind(py))?;
            client = c.unwrap_or(client);
            scheme = s.unwrap_or(scheme);
        }
    }
    let state = server.lifespan_state.borrow(py)?.as_ref().map(|s| s.clone_ref(py));
    let origin = Origin { client: &client, local: &local, scheme: &scheme };
    // Taken out of the state while in use: making the scope allocates containers.
    let mut base = match base {
        Some(b) => b,
        None => ConnScope::new(server.scope_template.bind(py))?.with_tls(py, this.st.borrow(py)?.io())?,
    };
    let scope = base.scope(py, head, &origin, state.as_ref())?;
    this.st.borrow_mut(py)?.scope = Some(base);
    Ok((scope, Cycle::new(id, head, py, InFlight::enter(&server.in_flight))))
}

/// Learn how the application's task ended: now if it is done (it ran to its end in its first
/// step), else when it is (`_task_done`).
pub(crate) fn watch(send: &Bound<'_, Send>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = send.py();
    if task.call_method0(intern!(py, "done"))?.is_truthy()? {
        return send.get().task_done(py, task);
    }
    task.call_method1(intern!(py, "add_done_callback"), (send.getattr(intern!(py, "_task_done"))?,))?;
    Ok(())
}

/// How many references `obj` has.
fn refs<T>(_py: Python<'_>, obj: &Py<T>) -> isize {
    // SAFETY: `obj` is a live object (we hold a reference) and the GIL is held (`_py`).
    unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) }
}

/// What an ASGI request is called with: `receive`, and `send` as the bound method `Send.send`
/// (`send_fn`; `send` is its `__self__`, for the server's own calls).
pub(crate) struct Callables {
    pub(crate) receive: Py<Receive>,
    pub(crate) send: Py<Send>,
    pub(crate) send_fn: Py<PyAny>,
}

/// `Callables` for the cycle `id` of `conn`: those of its previous request, when nothing but
/// the connection holds them any more (renumbered), else new ones.
///
/// Why: making and freeing the objects cost ~900 instructions of an ~19,600-instruction ASGI
/// "hello world" request (callgrind). Objects no one else references cannot be called by
/// anyone (neither class supports weak references), so giving them to the next request
/// cannot let the previous one's application reach the new cycle; ones still referenced (a
/// coroutine still running, an application that kept `send`) are left alone.
///
/// Why `send` is a bound method and not the `Send` object: calling an object goes through
/// `tp_call` (PyO3 has no vectorcall for `__call__`), which packs the message in a tuple and
/// unpacks it again; a method defined with PyO3 is called by vectorcall, with no tuple:
/// ~500 instructions fewer for the two sends of a small response.
pub(crate) fn callables(conn: &Bound<'_, HttpConn>, id: u64) -> PyResult<Callables> {
    let py = conn.py();
    let spare = conn.get().st.borrow_mut(py)?.spare.take();
    if let Some(c) = spare {
        // `send` has two references: the connection's and its bound method's.
        if refs(py, &c.receive) == 1 && refs(py, &c.send) == 2 && refs(py, &c.send_fn) == 1 {
            c.receive.get().cycle.store(id, Ordering::Relaxed);
            c.send.get().cycle.store(id, Ordering::Relaxed);
            return Ok(c);
        }
    }
    let receive = Py::new(py, Receive { conn: conn.clone().unbind(), cycle: id.into(), ws: false })?;
    let send = Py::new(py, Send { conn: conn.clone().unbind(), cycle: id.into(), ws: false })?;
    let send_fn = send.bind(py).getattr(intern!(py, "send"))?.unbind();
    Ok(Callables { receive, send, send_fn })
}

impl Callables {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.receive)?;
        visit.call(&self.send)?;
        visit.call(&self.send_fn)
    }
}

/// `receive` (ASGI).
#[pyclass(module = "ringloop._core", frozen)]
pub struct Receive {
    pub(crate) conn: Py<HttpConn>,
    /// The cycle it reads for (renumbered when the pair is given to the next request, see
    /// `callables`).
    pub(crate) cycle: AtomicU64,
    /// The cycle has the `websocket` scope (`websocket::asgi`).
    pub(crate) ws: bool,
}

impl Receive {
    pub(crate) fn cycle(&self) -> u64 {
        self.cycle.load(Ordering::Relaxed)
    }
}

#[pymethods]
impl Receive {
    fn __call__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let conn = self.conn.bind(py);
        if self.ws {
            return super::websocket::asgi::receive(conn, self.cycle());
        }
        let loop_ = conn.get().server.get().loop_.bind(py).clone();
        let got = cycle::poll_body(conn, self.cycle())?;
        HttpConn::update_reading(conn)?;
        match got {
            Got::Body(b, more) => ready(py, &loop_, cycle::body_message(py, b, more)?),
            Got::Disconnect => ready(py, &loop_, disconnect(py)?),
            Got::Wait => {
                let fut = loop_.call_method0(intern!(py, "create_future"))?;
                let stored = {
                    let mut st = conn.get().st.borrow_mut(py)?;
                    match current(&mut st, self.cycle()) {
                        Some(c) if c.receive_waiter.is_none() => {
                            c.receive_waiter = Some(fut.clone().unbind());
                            true
                        }
                        Some(_) => return Err(PyRuntimeError::new_err("receive() called while another receive() is waiting")),
                        None => false,
                    }
                };
                if !stored {
                    return ready(py, &loop_, disconnect(py)?);
                }
                Ok(fut)
            }
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.conn)
    }
}

/// `send` (ASGI), with the two calls `ringloop.server.asgi.run_asgi` makes when the
/// application returns or raises, and the two `http.response.pathsend` needs.
#[pyclass(module = "ringloop._core", frozen)]
pub struct Send {
    pub(crate) conn: Py<HttpConn>,
    /// The cycle it writes for (see `Receive::cycle`).
    pub(crate) cycle: AtomicU64,
    /// The cycle has the `websocket` scope (`websocket::asgi`).
    pub(crate) ws: bool,
}

/// A message's `type`.
fn message_type<'py>(msg: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyString>> {
    let py = msg.py();
    match msg.get_item(intern!(py, "type"))? {
        Some(t) => Ok(t.cast_into::<PyString>()?),
        None => Err(PyValueError::new_err("ASGI message without a 'type'")),
    }
}

impl Send {
    pub(crate) fn cycle(&self) -> u64 {
        self.cycle.load(Ordering::Relaxed)
    }

    /// What the application is called in logs.
    fn what(&self, _py: Python<'_>) -> &'static str {
        match self.conn.get().server.get().interface {
            super::server::Interface::Asgi => "ASGI callable",
            super::server::Interface::Wsgi => "WSGI application",
            _ => "native handler",
        }
    }

    /// The application raised `exc`: logged with its traceback (not a cancel, nor the client
    /// having gone), then the cycle ends (500, or the connection closed).
    pub(crate) fn failed(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let cancelled = exc.is_instance(&py.import(intern!(py, "asyncio"))?.getattr(intern!(py, "CancelledError"))?)?;
        let lost = self.conn.get().is_lost(py)?;
        let quiet = cancelled || (lost && exc.is_instance_of::<ClientDisconnected>());
        if !quiet {
            self.conn.get().server.get().log_error.call1(py, (format!("Exception in {}\n", self.what(py).replace("callable", "application")), exc))?;
        }
        if self.ws && self.ws_ended(py, true)? {
            return Ok(());
        }
        cycle::abandon(self.conn.bind(py), self.cycle())
    }

    /// The application returned `result`: a response it did not finish ends the cycle (500,
    /// or the connection closed), logged as uvicorn words it.
    pub(crate) fn returned(&self, py: Python<'_>, result: &Bound<'_, PyAny>) -> PyResult<()> {
        let log = &self.conn.get().server.get().log_error;
        if self.ws && self.ws_ended(py, false)? {
            if !result.is_none() {
                log.call1(py, (format!("ASGI callable should return None, but returned '{}'.", result.repr()?), py.None()))?;
            }
            return Ok(());
        }
        let state = {
            let mut st = self.conn.get().st.borrow_mut(py)?;
            current(&mut st, self.cycle()).map(|c| (c.started, c.complete))
        };
        match state {
            Some((false, _)) => log.call1(py, (format!("{} returned without starting response.", self.what(py)), py.None()))?,
            Some((true, false)) => log.call1(py, (format!("{} returned without completing response.", self.what(py)), py.None()))?,
            _ => py.None(),
        };
        if !result.is_none() {
            log.call1(py, (format!("ASGI callable should return None, but returned '{}'.", result.repr()?), py.None()))?;
        }
        cycle::abandon(self.conn.bind(py), self.cycle())
    }

    /// A WebSocket application ended (`error`: it raised): `true` if the session took it (an
    /// open session closes; one still in its handshake gets the 500 with a log line), `false`
    /// when the upgrade was denied and the cycle is an HTTP one.
    fn ws_ended(&self, py: Python<'_>, error: bool) -> PyResult<bool> {
        let conn = self.conn.bind(py);
        let handshake = {
            let mut st = conn.get().st.borrow_mut(py)?;
            match st.ws.as_deref().filter(|w| w.cycle == self.cycle()) {
                None => return Ok(false),
                Some(w) => {
                    let h = matches!(w.phase, super::websocket::Phase::Handshake(_));
                    if h {
                        st.ws = None;
                    }
                    h
                }
            }
        };
        if !handshake {
            super::websocket::app_ended(conn, self.cycle(), error)?;
            return Ok(true);
        }
        if !error {
            let log = &conn.get().server.get().log_error;
            log.call1(py, ("ASGI callable returned without sending handshake.", py.None()))?;
        }
        cycle::end_with_error(conn, self.cycle(), 500, "websocket-no-handshake")?;
        Ok(true)
    }

    /// How the application's task ended (see `watch`): `result()` returns what it returned, or
    /// raises what it raised (a cancel included), which also marks the exception retrieved.
    fn task_done(&self, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        match task.call_method0(intern!(py, "result")) {
            Ok(result) => self.returned(py, &result),
            Err(e) => self.failed(py, &e.into_value(py).into_bound(py)),
        }
    }

    fn start(&self, py: Python<'_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        let status: u16 = match msg.get_item(intern!(py, "status"))? {
            Some(s) => s.extract().map_err(|_| PyTypeError::new_err(format!("Invalid HTTP status code '{s}' in response.")))?,
            None => return Err(PyValueError::new_err("http.response.start without a 'status'")),
        };
        let headers = msg.get_item(intern!(py, "headers"))?.map(Bound::unbind);
        cycle::record_start(self.conn.bind(py), self.cycle(), status, headers)
    }

    fn body(&self, py: Python<'_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        let body = match msg.get_item(intern!(py, "body"))? {
            None => pyo3::types::PyBytes::new(py, b""),
            Some(b) => cycle::body_bytes(b)?,
        };
        let more = match msg.get_item(intern!(py, "more_body"))? {
            Some(m) => m.is_truthy()?,
            None => false,
        };
        cycle::write_body(self.conn.bind(py), self.cycle(), &body, more)
    }
}

#[pymethods]
impl Send {
    fn __call__<'py>(slf: &Bound<'py, Self>, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        Self::send(slf, message)
    }

    /// `send(message)`: what an HTTP application is given (see `callables`).
    fn send<'py>(slf: &Bound<'py, Self>, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let conn = this.conn.bind(py);
        let msg = message.cast::<PyDict>().map_err(|_| PyTypeError::new_err("an ASGI message must be a dict"))?;
        let ty = message_type(msg)?;
        if this.ws {
            super::websocket::asgi::send(conn, this.cycle(), ty.to_str()?, msg)?;
            if conn.get().write_blocked(py)? {
                return Ok(HttpConn::drained(conn)?.into_bound(py));
            }
            return cycle::done_future(py);
        }
        match ty.to_str()? {
            "http.response.start" => this.start(py, msg)?,
            "http.response.body" => this.body(py, msg)?,
            "http.response.pathsend" => {
                // `run_asgi.pathsend(send, path)`: a coroutine that sends the file (sendfile).
                let helper = conn.get().server.get().runner.bind(py).getattr(intern!(py, "pathsend"))?;
                let path = msg.get_item(intern!(py, "path"))?.ok_or_else(|| PyValueError::new_err("http.response.pathsend without a 'path'"))?;
                return helper.call1((slf, path));
            }
            other => return Err(PyRuntimeError::new_err(format!("Unexpected ASGI message type '{other}'."))),
        }
        if conn.get().write_blocked(py)? {
            return Ok(HttpConn::drained(conn)?.into_bound(py));
        }
        cycle::done_future(py)
    }

    /// Write a native handler's answer if it can be written natively (see `native::respond`).
    fn _respond(&self, py: Python<'_>, answer: &Bound<'_, PyAny>) -> PyResult<bool> {
        super::native::respond(self.conn.bind(py), self.cycle(), answer)
    }

    /// The application's task is done (see `watch`).
    fn _task_done(&self, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        self.task_done(py, task)
    }

    /// The application returned `result` (native handlers, the WSGI bridge).
    fn _returned(&self, py: Python<'_>, result: &Bound<'_, PyAny>) -> PyResult<()> {
        self.returned(py, result)
    }

    /// The application raised `exc` (native handlers, the WSGI bridge).
    fn _failed(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        self.failed(py, exc)
    }

    /// `http.response.pathsend`: the head for a file of `size` bytes; `false` when the cycle
    /// is over (nothing to send).
    fn _pathsend_head(&self, py: Python<'_>, size: u64) -> PyResult<bool> {
        {
            let mut st = self.conn.get().st.borrow_mut(py)?;
            match current(&mut st, self.cycle()) {
                Some(c) if c.start_seen && !c.complete => c.sent += size,
                Some(_) => return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.pathsend'.")),
                None => return Ok(false),
            }
        }
        if !cycle::write_head(self.conn.bind(py), self.cycle(), Some(size))? {
            return Ok(false);
        }
        let conn = self.conn.bind(py);
        let framed = {
            let mut st = conn.get().st.borrow_mut(py)?;
            let st = &mut *st;
            st.h1.frame_body(&mut st.out, size as usize).map_err(|e| PyValueError::new_err(format!("invalid response body: {e}")))?.is_some()
        };
        HttpConn::flush(conn)?;
        Ok(framed)
    }

    fn _pathsend_done(&self, py: Python<'_>) -> PyResult<()> {
        cycle::end(self.conn.bind(py), self.cycle())
    }

    /// The connection's asyncio transport (for `loop.sendfile`), or `None` once it is gone.
    #[getter]
    fn _transport(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.conn.get().transport(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.conn)
    }
}
