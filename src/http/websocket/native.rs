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

use super::{handshake, read, Phase, Read, WsState};
use crate::http::conn::HttpConn;
use crate::http::conn::cycle;
use crate::http::stream::message::ClientDisconnected;
use crate::http::native::{open_request, Request};
use crate::http::stream::Opening;
use crate::http::request::HeadCopy;
use crate::http::proto::ws;

/// One native WebSocket session, as its handler sees it.
#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct WebSocket {
    conn: Py<HttpConn>,
    #[pyo3(get)]
    request: Py<Request>,
    #[pyo3(get)]
    subprotocol: Option<Py<PyString>>,
}

/// What the session's callbacks are.
fn handler(conn: &Bound<'_, HttpConn>) -> Py<PyAny> {
    conn.get().server.get().ws_handler.as_ref().expect("a native session has a handler").clone_ref(conn.py())
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
fn callback<'py>(conn: &Bound<'py, HttpConn>, name: &Bound<'py, PyString>, args: impl pyo3::call::PyCallArgs<'py>) -> PyResult<Called<'py>> {
    let py = conn.py();
    let h = handler(conn);
    let Ok(f) = h.bind(py).getattr(name) else { return Ok(Called::Absent) };
    match f.call1(args) {
        Ok(v) => Ok(Called::Returned(v)),
        Err(e) => {
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                return Err(e);
            }
            conn.get().server.get().log_error.call1(py, (format!("Exception in WebSocket handler {name}\n"), e.into_value(py)))?;
            let wrote = {
                let mut st = conn.get().st.borrow_mut(py)?;
                let st = &mut *st;
                st.ws.as_deref_mut().is_some_and(|w| w.close(&mut st.out, ws::code::INTERNAL_ERROR, ""))
            };
            if wrote {
                HttpConn::queue_flush(conn)?;
            }
            Ok(Called::Raised)
        }
    }
}

/// Start a native session for the upgrade request `head` (cycle `id`): `on_connect`, the 101,
/// `on_open`, and the messages already here. `Ok(true)`: go on reading requests (the upgrade
/// was answered with HTTP instead).
pub(crate) fn start(conn: &Bound<'_, HttpConn>, head: &HeadCopy, id: u64) -> PyResult<bool> {
    let py = conn.py();
    let this = conn.get();
    let (request, _) = open_request(&Opening { conn: conn.as_any(), sink: HttpConn::sink(), id }, head, false)?;
    let Some(upgrade) = handshake::check(conn, head, id)? else {
        return Ok(this.st.borrow(py)?.cycle.is_none());
    };
    handshake::begin(conn, id, upgrade)?;
    let subprotocol = match callback(conn, intern!(py, "on_connect"), (request.bind(py),))? {
        Called::Returned(v) if v.is_instance_of::<PyString>() => Some(v.cast_into::<PyString>()?.unbind()),
        Called::Returned(v) if v.is(pyo3::types::PyBool::new(py, false)) => {
            handshake::refuse(conn, id, 403, None, b"")?;
            return Ok(this.st.borrow(py)?.cycle.is_none());
        }
        Called::Returned(_) | Called::Absent => None,
        Called::Raised => {
            // Logged by `callback`: the upgrade is answered with a 500.
            this.st.borrow_mut(py)?.ws = None;
            cycle::end_with_error(conn, id, 500, "websocket-on-connect-error")?;
            return Ok(this.st.borrow(py)?.cycle.is_none());
        }
    };
    let name = subprotocol.as_ref().map(|s| s.bind(py).to_str().map(str::to_owned)).transpose()?;
    if !handshake::switch(conn, id, name.as_deref(), &[])? {
        return Ok(this.st.borrow(py)?.cycle.is_none());
    }
    handshake::accepted(conn, id)?;
    let ws = Py::new(py, WebSocket { conn: conn.clone().unbind(), request, subprotocol })?;
    {
        // The request's cycle ends at the 101: the session lives on the connection.
        let mut st = this.st.borrow_mut(py)?;
        st.cycle = None;
        if let Some(w) = st.ws.as_deref_mut() {
            w.native = Some(ws.clone_ref(py));
        }
    }
    callback(conn, intern!(py, "on_open"), (ws.bind(py),))?;
    HttpConn::queue_flush(conn)?;
    deliver(conn)?;
    // The connection is the session's now: no more requests are read from it.
    Ok(false)
}

/// Hand the messages that arrived to `on_message`, one by one, until none is complete or the
/// transport's buffer is full; the end of the session to `on_close`, once.
pub(crate) fn deliver(conn: &Bound<'_, HttpConn>) -> PyResult<()> {
    let py = conn.py();
    loop {
        enum Got {
            Text(Py<PyString>),
            Bytes(Py<PyBytes>),
            End(u16, String),
            Stop,
        }
        let (got, ws) = {
            let mut st = conn.get().st.borrow_mut(py)?;
            let st = &mut *st;
            if st.write_paused && !st.lost {
                return Ok(());
            }
            let lost = st.lost;
            let Some(w) = st.ws.as_deref_mut() else { return Ok(()) };
            let Some(ws) = w.native.as_ref().map(|n| n.clone_ref(py)) else { return Ok(()) };
            if w.ended.is_some() {
                return Ok(());
            }
            let Phase::Open(c) = &mut w.phase else { return Ok(()) };
            let got = match read(c, &mut st.out, lost, |s| Got::Text(PyString::new(py, s).unbind()), |b| Got::Bytes(PyBytes::new(py, b).unbind())) {
                Read::Message(m) => m,
                Read::Wait => Got::Stop,
                Read::Lost => Got::End(ws::code::ABNORMAL, String::new()),
                Read::End(code, reason) => Got::End(code, reason),
            };
            if let Got::End(code, reason) = &got {
                w.ended = Some((*code, reason.clone()));
            }
            (got, ws)
        };
        match got {
            Got::Stop => break,
            Got::Text(s) => {
                callback(conn, intern!(py, "on_message"), (ws.bind(py), s))?;
            }
            Got::Bytes(b) => {
                callback(conn, intern!(py, "on_message"), (ws.bind(py), b))?;
            }
            Got::End(code, reason) => {
                HttpConn::close_when_flushed(conn)?;
                HttpConn::queue_flush(conn)?;
                callback(conn, intern!(py, "on_close"), (ws.bind(py), code, reason))?;
                return Ok(());
            }
        }
    }
    HttpConn::queue_flush(conn)
}

/// The connection is gone: a session whose end was not told yet gets `on_close` with 1006.
pub(crate) fn connection_lost(conn: &Bound<'_, HttpConn>) -> PyResult<()> {
    let py = conn.py();
    let ws = {
        let mut st = conn.get().st.borrow_mut(py)?;
        match st.ws.as_deref_mut() {
            Some(w) if w.native.is_some() && w.ended.is_none() => {
                w.ended = Some((ws::code::ABNORMAL, String::new()));
                w.native.as_ref().map(|n| n.clone_ref(py))
            }
            _ => None,
        }
    };
    if let Some(ws) = ws {
        callback(conn, intern!(py, "on_close"), (ws.bind(py), ws::code::ABNORMAL, ""))?;
    }
    Ok(())
}

impl WebSocket {
    /// Frame `data` into the connection's output; `Ok(false)` when the transport's buffer is
    /// above its high-water mark.
    fn send_one(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let conn = self.conn.bind(py);
        let paused = {
            let mut st = conn.get().st.borrow_mut(py)?;
            let st = &mut *st;
            let lost = st.lost;
            let Some(w) = st.ws.as_deref_mut().filter(|w| w.ended.is_none() && !lost) else {
                return Err(ClientDisconnected::new_err("the WebSocket is closed"));
            };
            let Some(c) = w.conn() else { return Err(ClientDisconnected::new_err("the WebSocket is closed")) };
            let sent = if let Ok(s) = data.cast::<PyString>() {
                c.send_text(&mut st.out, s.to_str()?)
            } else if let Ok(b) = data.cast::<PyBytes>() {
                c.send_binary(&mut st.out, b.as_bytes())
            } else {
                return Err(PyTypeError::new_err(format!("a WebSocket message is str or bytes, not {}", data.get_type().name()?)));
            };
            if sent.is_err() {
                return Err(ClientDisconnected::new_err("the WebSocket is closing"));
            }
            st.write_paused
        };
        super::frames_added(conn)?;
        Ok(!paused && !conn.get().write_blocked(py)?)
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
        let conn = self.conn.bind(py);
        {
            let mut st = conn.get().st.borrow_mut(py)?;
            let st = &mut *st;
            let Some(w) = st.ws.as_deref_mut() else { return Ok(()) };
            match w.try_close(&mut st.out, code, reason) {
                Ok(()) => {}
                Err(ws::SendError::Closing) => return Ok(()),
                Err(e) => return Err(PyValueError::new_err(format!("WebSocket close: {e} (code {code})"))),
            }
        }
        HttpConn::queue_flush(conn)
    }

    /// A ping with `data` (at most 125 bytes).
    #[pyo3(signature = (data = b"".as_slice()))]
    fn ping(&self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let conn = self.conn.bind(py);
        {
            let mut st = conn.get().st.borrow_mut(py)?;
            let st = &mut *st;
            let Some(c) = st.ws.as_deref_mut().and_then(WsState::conn) else { return Err(ClientDisconnected::new_err("the WebSocket is closed")) };
            c.ping(&mut st.out, data).map_err(|e| PyValueError::new_err(format!("WebSocket ping: {e}")))?;
        }
        HttpConn::queue_flush(conn)
    }

    /// The session ended (closed, or the connection is gone).
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        let st = self.conn.get().st.borrow(py)?;
        Ok(st.lost || st.ws.as_deref().is_none_or(|w| w.ended.is_some() || w.close_sent_at > 0))
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
