//! ASGI 3 over a `Stream`: the `receive`/`send` callables (the `http` scope is `scope`'s).
//!
//! `receive()` and `send()` return awaitables that are usually already done: `send` returns
//! one shared, finished future (awaiting it returns at once, with no allocation) unless the
//! transport's buffer is above its high-water mark, and `receive` a finished future holding
//! its message unless the body has not arrived yet. A coroutine awaiting a finished future
//! does not suspend, so a handler that needs no other I/O runs to its end inside the request's
//! first task step (see `conn`). The stream itself — body in, response out — is the driver's,
//! reached through the stream's `Sink`;
//! messages and errors follow the spec (2.4) with uvicorn's wording.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::request::HeadCopy;
use super::stream::message::{self, disconnect, ready, ClientDisconnected, Got};
use super::stream::{Dispatch, Opening, Sink, Spare, Stream};

/// The ASGI interface's `Dispatch`.
pub(crate) static DISPATCH: Asgi = Asgi;

pub(crate) struct Asgi;

impl Dispatch for Asgi {
    /// The scope, the stream opened, the application called with `receive` and `send` (the
    /// previous request's when no one holds them, `callables`) and its coroutine run in the
    /// connection's task; an application that raises at the call is answered as one that
    /// raised in its coroutine.
    fn start(&self, at: Opening<'_, '_>, head: &HeadCopy) -> PyResult<()> {
        let (py, sink) = (at.conn.py(), at.sink);
        let scope = sink.scope(at.conn, head)?;
        sink.open(at.conn, at.id, head, &scope)?;
        let spare = sink.take_spare(at.conn)?;
        let c = callables(at.conn, at.id, sink, spare)?;
        match sink.server(at.conn).app.bind(py).call1((scope, c.receive.bind(py), c.send_fn.bind(py))) {
            // The app's own coroutine is the task's (no wrapper frame): how it ended is read
            // off the task (`watch`).
            Ok(coro) => sink.run(at.conn, &coro, Some(c.send.bind(py).as_any()), Some((head.method.bind(py), head.path.bind(py))))?,
            Err(e) => c.send.get().failed(py, &e.into_value(py).into_bound(py))?,
        }
        sink.keep_spare(at.conn, Spare([c.receive.into_any(), c.send.into_any(), c.send_fn]))
    }

    /// Never asked: an ASGI application reads its body itself.
    fn collected(&self, _at: Opening<'_, '_>, _request: Py<PyAny>, _body: Py<pyo3::types::PyBytes>) -> PyResult<()> {
        Ok(())
    }
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
struct Callables {
    receive: Py<Receive>,
    send: Py<Send>,
    send_fn: Py<PyAny>,
}

/// `Callables` for the stream `id` of `conn`: `spare`, those of its previous request, when nothing but
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
fn callables(conn: &Bound<'_, PyAny>, id: u64, sink: &'static dyn Sink, spare: Option<Spare>) -> PyResult<Callables> {
    let py = conn.py();
    if let Some(Spare([receive, send, send_fn])) = spare {
        // `send` has two references: the connection's and its bound method's.
        if refs(py, &receive) == 1 && refs(py, &send) == 2 && refs(py, &send_fn) == 1 {
            // The spare is what `Asgi::start` kept: a `Receive` and a `Send`.
            let receive = receive.into_bound(py).cast_into::<Receive>()?.unbind();
            let send = send.into_bound(py).cast_into::<Send>()?.unbind();
            receive.get().stream.renumber(id);
            send.get().stream.renumber(id);
            return Ok(Callables { receive, send, send_fn });
        }
    }
    let (receive, send) = pair(conn, id, sink, false)?;
    let send_fn = send.bind(py).getattr(intern!(py, "send"))?.unbind();
    Ok(Callables { receive, send, send_fn })
}

/// A new `receive` and `send` on the stream `id` of `conn` (`ws`: it has the `websocket`
/// scope): the one place they are made, for ASGI, native async handlers, WSGI and WebSocket.
pub(crate) fn pair(conn: &Bound<'_, PyAny>, id: u64, sink: &'static dyn Sink, ws: bool) -> PyResult<(Py<Receive>, Py<Send>)> {
    let py = conn.py();
    let receive = Py::new(py, Receive { stream: Stream::new(conn.clone().unbind(), id, sink), ws })?;
    let send = Py::new(py, Send { stream: Stream::new(conn.clone().unbind(), id, sink), ws })?;
    Ok((receive, send))
}

/// `receive` (ASGI).
#[pyclass(module = "ringloop._core", frozen)]
pub struct Receive {
    /// The stream it reads (renumbered when the pair is given to the next request, see
    /// `callables`).
    pub(crate) stream: Stream,
    /// The stream has the `websocket` scope (`websocket::asgi`).
    pub(crate) ws: bool,
}

#[pymethods]
impl Receive {
    fn __call__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (s, conn) = (&self.stream, self.stream.conn(py));
        if self.ws {
            return s.sink().ws_receive(conn, s.id());
        }
        let loop_ = s.sink().loop_(conn)?;
        let got = s.sink().poll_body(conn, s.id())?;
        s.sink().body_taken(conn)?;
        match got {
            Got::Body(b, more) => ready(py, &loop_, message::body_message(py, b, more)?),
            Got::Disconnect => ready(py, &loop_, disconnect(py)?),
            Got::Wait => {
                let fut = loop_.call_method0(intern!(py, "create_future"))?;
                if !s.sink().wait_body(conn, s.id(), &fut)? {
                    return ready(py, &loop_, disconnect(py)?);
                }
                Ok(fut)
            }
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.stream.traverse(&visit)
    }
}

/// `send` (ASGI), with the two calls `ringloop.server.asgi.run_asgi` makes when the
/// application returns or raises, and the two `http.response.pathsend` needs.
#[pyclass(module = "ringloop._core", frozen)]
pub struct Send {
    /// The stream it writes (see `Receive::stream`).
    pub(crate) stream: Stream,
    /// The stream has the `websocket` scope (`websocket::asgi`).
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
    /// What the application is called in logs.
    fn what(&self, py: Python<'_>) -> &'static str {
        self.stream.sink().app_name(self.stream.conn(py))
    }

    /// The application raised `exc`: logged with its traceback (not a cancel, nor the client
    /// having gone), then the cycle ends (500, or the connection closed).
    pub(crate) fn failed(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let cancelled = exc.is_instance(&py.import(intern!(py, "asyncio"))?.getattr(intern!(py, "CancelledError"))?)?;
        let (s, conn) = (&self.stream, self.stream.conn(py));
        let lost = s.sink().is_lost(conn)?;
        let quiet = cancelled || (lost && exc.is_instance_of::<ClientDisconnected>());
        if !quiet {
            s.sink().log_error(conn, format!("Exception in {}\n", self.what(py).replace("callable", "application")), exc)?;
        }
        if self.ws && s.sink().ws_ended(conn, s.id(), true)? {
            return Ok(());
        }
        s.sink().abandon(conn, s.id())
    }

    /// The application returned `result`: a response it did not finish ends the cycle (500,
    /// or the connection closed), logged as uvicorn words it.
    pub(crate) fn returned(&self, py: Python<'_>, result: &Bound<'_, PyAny>) -> PyResult<()> {
        let (s, conn) = (&self.stream, self.stream.conn(py));
        let none = py.None().into_bound(py);
        if self.ws && s.sink().ws_ended(conn, s.id(), false)? {
            if !result.is_none() {
                s.sink().log_error(conn, format!("ASGI callable should return None, but returned '{}'.", result.repr()?), &none)?;
            }
            return Ok(());
        }
        match s.sink().progress(conn, s.id())? {
            Some(p) if !p.started => s.sink().log_error(conn, format!("{} returned without starting response.", self.what(py)), &none)?,
            Some(p) if !p.complete => s.sink().log_error(conn, format!("{} returned without completing response.", self.what(py)), &none)?,
            _ => {}
        };
        if !result.is_none() {
            s.sink().log_error(conn, format!("ASGI callable should return None, but returned '{}'.", result.repr()?), &none)?;
        }
        s.sink().abandon(conn, s.id())
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
        let (s, conn) = (&self.stream, self.stream.conn(py));
        s.sink().start(conn, s.id(), status, headers)?;
        // `http.response.trailers`: the body's end is not the end (told once the start is
        // accepted, so a refused second start changes nothing).
        if let Some(t) = msg.get_item(intern!(py, "trailers"))? {
            if t.is_truthy()? {
                s.sink().expect_trailers(conn, s.id())?;
            }
        }
        Ok(())
    }

    /// `http.response.early_hint`: `links`, a list of `bytes` (each a `Link` field value).
    fn early_hint(&self, py: Python<'_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        let links = msg.get_item(intern!(py, "links"))?.ok_or_else(|| PyValueError::new_err("http.response.early_hint without 'links'"))?;
        let links = links
            .try_iter()?
            .map(|l| Ok(message::body_bytes(l?).map_err(|_| PyTypeError::new_err("http.response.early_hint's links must be bytes"))?.as_bytes().trim_ascii().to_vec()))
            .collect::<PyResult<Vec<_>>>()?;
        self.stream.sink().early_hint(self.stream.conn(py), self.stream.id(), &links)
    }

    fn trailers(&self, py: Python<'_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        let headers = msg.get_item(intern!(py, "headers"))?.map(Bound::unbind);
        let more = match msg.get_item(intern!(py, "more_trailers"))? {
            Some(m) => m.is_truthy()?,
            None => false,
        };
        self.stream.sink().trailers(self.stream.conn(py), self.stream.id(), headers, more)
    }

    fn body(&self, py: Python<'_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        let body = match msg.get_item(intern!(py, "body"))? {
            None => pyo3::types::PyBytes::new(py, b""),
            Some(b) => message::body_bytes(b)?,
        };
        let more = match msg.get_item(intern!(py, "more_body"))? {
            Some(m) => m.is_truthy()?,
            None => false,
        };
        self.stream.sink().body(self.stream.conn(py), self.stream.id(), &body, more)
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
        let (s, conn) = (&this.stream, this.stream.conn(py));
        let msg = message.cast::<PyDict>().map_err(|_| PyTypeError::new_err("an ASGI message must be a dict"))?;
        let ty = message_type(msg)?;
        if this.ws {
            s.sink().ws_send(conn, s.id(), ty.to_str()?, msg)?;
            if s.sink().write_blocked(conn, s.id())? {
                return Ok(s.sink().drained(conn, s.id())?.into_bound(py));
            }
            return message::done_future(py);
        }
        match ty.to_str()? {
            "http.response.start" => this.start(py, msg)?,
            "http.response.body" => this.body(py, msg)?,
            "http.response.trailers" => this.trailers(py, msg)?,
            "http.response.early_hint" => this.early_hint(py, msg)?,
            "http.response.pathsend" => {
                // `run_asgi.pathsend(send, path)`: a coroutine that sends the file (sendfile).
                let helper = s.sink().runner(conn)?.getattr(intern!(py, "pathsend"))?;
                let path = msg.get_item(intern!(py, "path"))?.ok_or_else(|| PyValueError::new_err("http.response.pathsend without a 'path'"))?;
                return helper.call1((slf, path));
            }
            other => return Err(PyRuntimeError::new_err(format!("Unexpected ASGI message type '{other}'."))),
        }
        if s.sink().write_blocked(conn, s.id())? {
            return Ok(s.sink().drained(conn, s.id())?.into_bound(py));
        }
        message::done_future(py)
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
        self.stream.sink().file_head(self.stream.conn(py), self.stream.id(), size)
    }

    fn _pathsend_done(&self, py: Python<'_>) -> PyResult<()> {
        self.stream.sink().end(self.stream.conn(py), self.stream.id())
    }

    /// The body of a `_pathsend_head` response: `count` bytes of `file` from `offset`, sent by
    /// the stream (`Sink::send_file`); an awaitable.
    fn _sendfile<'py>(&self, py: Python<'py>, file: &Bound<'py, PyAny>, offset: u64, count: u64) -> PyResult<Bound<'py, PyAny>> {
        self.stream.sink().send_file(self.stream.conn(py), self.stream.id(), file, offset, count)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.stream.traverse(&visit)
    }
}
