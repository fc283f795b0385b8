//! Native WebSocket handlers: callbacks called straight from the connection, beside the
//! native HTTP handler API (`ringloop.server.native`). No task, no ASGI message dicts: a
//! message is handed to `on_message(ws, data)` as the `str` or `bytes` it is, and
//! `ws.send(data)` frames it into the connection's output at once.
//!
//! The handler object (`native_handler(..., websocket=handler)`) may define
//! `on_connect(request)` (return `False` to deny with 403, a `str` to pick that subprotocol,
//! anything else to accept), `on_open(ws)`, `on_message(ws, data)` and
//! `on_close(ws, code, reason)`; every one is optional. An exception in a callback is logged
//! with its traceback and closes the session with 1011.
//!
//! Back-pressure: `send` returns `False` once the transport's buffer is above its high-water
//! mark, and while it is, no further message is delivered (the client is held back by TCP);
//! delivery resumes when the buffer drains. `broadcast(sockets, data)` sends one message to
//! many sessions in one native loop.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::{handshake, read, Channel, Phase, Read, Session, WsState};
use crate::http::native::{open_request, Request};
use crate::http::proto::ws;
use crate::http::request::HeadCopy;
use crate::http::stream::message::ClientDisconnected;
use crate::http::stream::Opening;

/// One native WebSocket session, as its handler sees it: the connection (as a plain object),
/// the stream the session runs on, and its channel.
#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct WebSocket {
    conn: Py<PyAny>,
    id: u64,
    ch: &'static dyn Channel,
    #[pyo3(get)]
    request: Py<Request>,
    #[pyo3(get)]
    subprotocol: Option<Py<PyString>>,
}

/// What the session's callbacks are.
fn handler(s: Session<'_, '_>) -> Py<PyAny> {
    s.server().ws_handler.as_ref().expect("a native session has a handler").clone_ref(s.py())
}

/// How a callback went.
enum Called<'py> {
    /// The handler has no such callback.
    Absent,
    Returned(Bound<'py, PyAny>),
    /// It raised: logged, and the session (if open) closes with 1011.
    Raised,
}

/// Call `name` on the handler if it has it (see `Called`).
fn callback<'py>(s: Session<'_, 'py>, name: &Bound<'py, PyString>, args: impl pyo3::call::PyCallArgs<'py>) -> PyResult<Called<'py>> {
    let py = s.py();
    let h = handler(s);
    let Ok(f) = h.bind(py).getattr(name) else { return Ok(Called::Absent) };
    match f.call1(args) {
        Ok(v) => Ok(Called::Returned(v)),
        Err(e) => {
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                return Err(e);
            }
            s.sink().log_error(s.conn, format!("Exception in WebSocket handler {name}\n"), e.into_value(py).bind(py))?;
            let wrote = s.with(|p| p.ws.as_deref_mut().is_some_and(|w| w.close(p.out, ws::code::INTERNAL_ERROR, "")))?;
            if wrote {
                s.queue_flush()?;
            }
            Ok(Called::Raised)
        }
    }
}

/// Start a native session for the upgrade request `head` (on the stream `s.id`): `on_connect`,
/// the acceptance, `on_open`, and the messages already here. `Ok(true)`: go on reading
/// requests (the upgrade was answered with HTTP instead).
pub(crate) fn start(s: Session<'_, '_>, head: &HeadCopy) -> PyResult<bool> {
    let py = s.py();
    let (sink, id) = (s.sink(), s.id);
    let over = || -> PyResult<bool> { Ok(sink.progress(s.conn, id)?.is_none()) };
    let (request, _) = open_request(&Opening { conn: s.conn, sink, id }, head, false)?;
    let Some(upgrade) = handshake::check(s, head)? else { return over() };
    handshake::begin(s, upgrade)?;
    let subprotocol = match callback(s, intern!(py, "on_connect"), (request.bind(py),))? {
        Called::Returned(v) if v.is_instance_of::<PyString>() => Some(v.cast_into::<PyString>()?.unbind()),
        Called::Returned(v) if v.is(pyo3::types::PyBool::new(py, false)) => {
            handshake::refuse(s, 403, None, b"")?;
            return over();
        }
        Called::Returned(_) | Called::Absent => None,
        Called::Raised => {
            // Logged by `callback`: the upgrade is answered with a 500.
            s.with(|p| *p.ws = None)?;
            sink.fail(s.conn, id, 500, "websocket-on-connect-error")?;
            return over();
        }
    };
    let name = subprotocol.as_ref().map(|s| s.bind(py).to_str().map(str::to_owned)).transpose()?;
    if !handshake::switch(s, name.as_deref(), &[])? {
        return over();
    }
    handshake::accepted(s)?;
    let ws = Py::new(py, WebSocket { conn: s.conn.clone().unbind(), id, ch: s.ch, request, subprotocol })?;
    // The request's stream ends at the acceptance: the session lives on the channel.
    s.ch.release(s.conn, id)?;
    s.with(|p| {
        if let Some(w) = p.ws.as_deref_mut() {
            w.native = Some(ws.clone_ref(py));
        }
    })?;
    callback(s, intern!(py, "on_open"), (ws.bind(py),))?;
    s.queue_flush()?;
    deliver(s)?;
    // The channel is the session's now: no more requests are read from it.
    Ok(false)
}

/// Hand the messages that arrived to `on_message`, one by one, until none is complete or the
/// transport's buffer is full; the end of the session to `on_close`, once.
pub(crate) fn deliver(s: Session<'_, '_>) -> PyResult<()> {
    let py = s.py();
    loop {
        enum Got {
            Text(Py<PyString>),
            Bytes(Py<PyBytes>),
            End(u16, String),
            Stop,
        }
        let next = s.with(|p| {
            if p.write_paused && !p.lost {
                return None;
            }
            let lost = p.lost;
            let w = p.ws.as_deref_mut()?;
            let ws = w.native.as_ref().map(|n| n.clone_ref(py))?;
            if w.ended.is_some() {
                return None;
            }
            let Phase::Open(c) = &mut w.phase else { return None };
            let got = match read(c, p.out, lost, |s| Got::Text(PyString::new(py, s).unbind()), |b| Got::Bytes(PyBytes::new(py, b).unbind())) {
                Read::Message(m) => m,
                Read::Wait => Got::Stop,
                Read::Lost => Got::End(ws::code::ABNORMAL, String::new()),
                Read::End(code, reason) => Got::End(code, reason),
            };
            if let Got::End(code, reason) = &got {
                w.ended = Some((*code, reason.clone()));
            }
            Some((got, ws))
        })?;
        let Some((got, ws)) = next else { return Ok(()) };
        match got {
            Got::Stop => break,
            Got::Text(t) => {
                callback(s, intern!(py, "on_message"), (ws.bind(py), t))?;
            }
            Got::Bytes(b) => {
                callback(s, intern!(py, "on_message"), (ws.bind(py), b))?;
            }
            Got::End(code, reason) => {
                s.close()?;
                s.queue_flush()?;
                callback(s, intern!(py, "on_close"), (ws.bind(py), code, reason))?;
                return Ok(());
            }
        }
    }
    s.queue_flush()
}

/// The channel is gone: a session whose end was not told yet gets `on_close` with 1006.
pub(crate) fn connection_lost(s: Session<'_, '_>) -> PyResult<()> {
    let py = s.py();
    let ws = s.with(|p| match p.ws.as_deref_mut() {
        Some(w) if w.native.is_some() && w.ended.is_none() => {
            w.ended = Some((ws::code::ABNORMAL, String::new()));
            w.native.as_ref().map(|n| n.clone_ref(py))
        }
        _ => None,
    })?;
    if let Some(ws) = ws {
        callback(s, intern!(py, "on_close"), (ws.bind(py), ws::code::ABNORMAL, ""))?;
    }
    Ok(())
}

impl WebSocket {
    fn session<'a, 'py>(&'a self, py: Python<'py>) -> Session<'a, 'py> {
        Session::new(self.conn.bind(py), self.id, self.ch)
    }

    /// Frame `data` into the channel's output; `Ok(false)` when the transport's buffer is
    /// above its high-water mark.
    fn send_one(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let s = self.session(py);
        // The message as text or bytes, checked before the borrow.
        let msg: Result<&str, &[u8]> = if let Ok(t) = data.cast::<PyString>() {
            Ok(t.to_str()?)
        } else if let Ok(b) = data.cast::<PyBytes>() {
            Err(b.as_bytes())
        } else {
            return Err(PyTypeError::new_err(format!("a WebSocket message is str or bytes, not {}", data.get_type().name()?)));
        };
        let paused = s.with(|p| {
            let lost = p.lost;
            let Some(w) = p.ws.as_deref_mut().filter(|w| w.ended.is_none() && !lost) else {
                return Err(ClientDisconnected::new_err("the WebSocket is closed"));
            };
            let Some(c) = w.conn() else { return Err(ClientDisconnected::new_err("the WebSocket is closed")) };
            let sent = match msg {
                Ok(t) => c.send_text(p.out, t),
                Err(b) => c.send_binary(p.out, b),
            };
            if sent.is_err() {
                return Err(ClientDisconnected::new_err("the WebSocket is closing"));
            }
            Ok(p.write_paused)
        })??;
        super::frames_added(s)?;
        Ok(!paused && !s.sink().write_blocked(s.conn, s.id)?)
    }
}

#[pymethods]
impl WebSocket {
    /// Send a message (`str`: text, `bytes`: binary). `False`: the transport's buffer is above
    /// its high-water mark (messages are still queued; no more are delivered until it drains).
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.send_one(py, data)
    }

    /// Start the close handshake; `on_close` follows the client's answer.
    #[pyo3(signature = (code = 1000, reason = ""))]
    fn close(&self, py: Python<'_>, code: u16, reason: &str) -> PyResult<()> {
        let s = self.session(py);
        match s.with(|p| p.ws.as_deref_mut().map(|w| w.try_close(p.out, code, reason)))? {
            None | Some(Err(ws::SendError::Closing)) => Ok(()),
            Some(Err(e)) => Err(PyValueError::new_err(format!("WebSocket close: {e} (code {code})"))),
            Some(Ok(())) => s.queue_flush(),
        }
    }

    /// A ping with `data` (at most 125 bytes).
    #[pyo3(signature = (data = b"".as_slice()))]
    fn ping(&self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let s = self.session(py);
        s.with(|p| {
            let Some(c) = p.ws.as_deref_mut().and_then(WsState::conn) else { return Err(ClientDisconnected::new_err("the WebSocket is closed")) };
            c.ping(p.out, data).map_err(|e| PyValueError::new_err(format!("WebSocket ping: {e}")))
        })??;
        s.queue_flush()
    }

    /// The session ended (closed, or the connection is gone).
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        self.session(py).with(|p| p.lost || p.ws.as_deref().is_none_or(|w| w.ended.is_some() || w.close_sent_at > 0))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.conn)?;
        visit.call(&self.request)?;
        visit.call(&self.subprotocol)
    }
}

/// `broadcast(sockets, data)`: send `data` to every open session of `sockets` in one native
/// loop; returns how many took it (closed ones are skipped, not an error).
#[pyfunction]
pub fn broadcast(py: Python<'_>, sockets: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
    if !data.is_instance_of::<PyString>() && !data.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!("a WebSocket message is str or bytes, not {}", data.get_type().name()?)));
    }
    let mut n = 0;
    for s in sockets.try_iter()? {
        let s = s?;
        let ws = s.cast::<WebSocket>().map_err(|_| PyTypeError::new_err("broadcast() takes WebSocket objects"))?;
        match ws.get().send_one(py, data) {
            Ok(_) => n += 1,
            Err(e) if e.is_instance_of::<ClientDisconnected>(py) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
