//! ASGI's `websocket` scope (spec 2.4) over a WebSocket session: the scope, what `receive`
//! returns (`websocket.connect`, `.receive`, `.disconnect`) and what `send` takes
//! (`websocket.accept`, `.send`, `.close`, and the `websocket.http.response` extension that
//! denies the upgrade with an HTTP response). `asgi::Receive` and `asgi::Send` of the request
//! come here when their cycle is a WebSocket one; errors are worded as uvicorn words them.
//!
//! What uvicorn users lose and get here: the close code and reason the application sends
//! reach the client (`websocket.close`), the client's reach the application
//! (`websocket.disconnect`), and a client that leaves before the accept is a
//! `websocket.disconnect` with 1006, never an exception.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::intern;

use super::{handshake, read, Phase, Read, Session, WsState};
use crate::http::asgi::pair;
use crate::http::proto::ws;
use crate::http::request::HeadCopy;
use crate::http::stream::message::{self, ready, ClientDisconnected};

/// Start the application for a WebSocket upgrade request (`head.websocket`): a refused
/// upgrade gets its 400/426 here; an acceptable one becomes a session in its handshake and the
/// application is called with the `websocket` scope. `Ok(true)`: the stream is already over.
pub(crate) fn start(s: Session<'_, '_>, head: &HeadCopy) -> PyResult<bool> {
    let py = s.py();
    let (any, sink, id) = (s.conn, s.sink(), s.id);
    // The stream opens as any request's does (`Dispatch`); the watch's record is this dict,
    // made into the `websocket` scope below.
    let scope = sink.scope(any, head)?;
    sink.open(any, id, head, &scope)?;
    let Some(upgrade) = handshake::check(s, head)? else {
        return Ok(sink.progress(any, id)?.is_none());
    };
    let scope = websocket_scope(&scope, &upgrade)?;
    handshake::begin(s, upgrade)?;
    let (receive, send) = pair(any, id, sink, true)?;
    match sink.server(any).app.bind(py).call1((scope, receive, send.bind(py))) {
        Ok(coro) => sink.run(any, &coro, Some(send.bind(py).as_any()), None)?,
        Err(e) => send.get().failed(py, &e.into_value(py).into_bound(py))?,
    }
    Ok(false)
}

/// The `http` scope made into a `websocket` one: no `method`, `ws`/`wss` for the scheme, the
/// offered subprotocols, and the extensions this server has.
fn websocket_scope<'py>(http: &Bound<'py, PyDict>, upgrade: &ws::Upgrade) -> PyResult<Bound<'py, PyDict>> {
    let py = http.py();
    http.set_item(intern!(py, "type"), intern!(py, "websocket"))?;
    http.del_item(intern!(py, "method"))?;
    let scheme = match http.get_item(intern!(py, "scheme"))? {
        Some(s) if s.extract::<&str>()? == "https" => intern!(py, "wss"),
        Some(s) if s.extract::<&str>()? == "wss" => intern!(py, "wss"),
        _ => intern!(py, "ws"),
    };
    http.set_item(intern!(py, "scheme"), scheme)?;
    let protocols = upgrade.subprotocols.iter().map(|p| String::from_utf8_lossy(p).into_owned());
    http.set_item(intern!(py, "subprotocols"), PyList::new(py, protocols)?)?;
    let extensions = PyDict::new(py);
    extensions.set_item(intern!(py, "websocket.http.response"), PyDict::new(py))?;
    // The connection's ASGI `tls` extension (`ConnScope::with_tls`) carries over.
    if let Some(tls) = http.get_item(intern!(py, "extensions"))?.map(|e| e.get_item(intern!(py, "tls"))).transpose().ok().flatten() {
        extensions.set_item(intern!(py, "tls"), tls)?;
    }
    http.set_item(intern!(py, "extensions"), extensions)?;
    Ok(http.clone())
}

/// What `receive` finds without waiting.
enum Next {
    Connect,
    Text(Py<PyString>),
    Bytes(Py<PyBytes>),
    Disconnect(u16, String),
    Wait,
}

/// The next message for the application of the stream (see the module docs of `websocket`
/// for when messages are decoded). Control frames are answered on the way.
fn poll(s: Session<'_, '_>) -> PyResult<Next> {
    let py = s.py();
    let (next, wrote, close) = s.with(|p| {
        let lost = p.lost;
        let before = p.out.len();
        let Some(w) = p.ws.as_deref_mut().filter(|w| w.stream == s.id) else {
            // Denied with an HTTP response, or never a session: nothing more will come.
            return (Next::Disconnect(ws::code::ABNORMAL, String::new()), false, false);
        };
        if let Some((code, reason)) = &w.ended {
            return (Next::Disconnect(*code, reason.clone()), false, false);
        }
        let mut close = false;
        let next = match &mut w.phase {
            Phase::Handshake(_) if !w.connect_given => {
                w.connect_given = true;
                Next::Connect
            }
            Phase::Handshake(_) if lost => Next::Disconnect(ws::code::ABNORMAL, String::new()),
            Phase::Handshake(_) => Next::Wait,
            Phase::Open(c) => match read(c, p.out, lost, |s| Next::Text(PyString::new(py, s).unbind()), |b| Next::Bytes(PyBytes::new(py, b).unbind())) {
                Read::Message(m) => m,
                Read::Wait => Next::Wait,
                Read::Lost => Next::Disconnect(ws::code::ABNORMAL, String::new()),
                Read::End(code, reason) => {
                    close = true;
                    Next::Disconnect(code, reason)
                }
            },
        };
        if let Next::Disconnect(code, reason) = &next {
            w.ended = Some((*code, reason.clone()));
        }
        (next, p.out.len() > before, close)
    })?;
    if close {
        s.close()?;
    }
    if wrote || close {
        s.queue_flush()?;
    }
    Ok(next)
}

fn message<'py>(py: Python<'py>, next: Next) -> PyResult<Option<Bound<'py, PyAny>>> {
    let d = PyDict::new(py);
    match next {
        Next::Wait => return Ok(None),
        Next::Connect => d.set_item(intern!(py, "type"), intern!(py, "websocket.connect"))?,
        Next::Text(s) => {
            d.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
            d.set_item(intern!(py, "text"), s)?;
        }
        Next::Bytes(b) => {
            d.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
            d.set_item(intern!(py, "bytes"), b)?;
        }
        Next::Disconnect(code, reason) => return disconnect(py, code, &reason).map(Some),
    }
    Ok(Some(d.into_any()))
}

/// `websocket.disconnect` with the close code and reason.
pub(crate) fn disconnect<'py>(py: Python<'py>, code: u16, reason: &str) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "websocket.disconnect"))?;
    d.set_item(intern!(py, "code"), code)?;
    d.set_item(intern!(py, "reason"), reason)?;
    Ok(d.into_any())
}

/// `receive()` of a WebSocket stream.
pub(crate) fn receive<'py>(s: Session<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
    let py = s.py();
    let loop_ = s.sink().loop_(s.conn)?;
    let next = poll(s)?;
    s.update_reading()?;
    if let Some(msg) = message(py, next)? {
        return ready(py, &loop_, msg);
    }
    let fut = loop_.call_method0(intern!(py, "create_future"))?;
    if !s.sink().wait_body(s.conn, s.id, &fut)? {
        return ready(py, &loop_, disconnect(py, ws::code::ABNORMAL, "")?);
    }
    Ok(fut)
}

/// A `receive` of the stream may wait and bytes arrived (or the session changed): answer it
/// if it can be.
pub(crate) fn answer_receiver(s: Session<'_, '_>) -> PyResult<()> {
    let py = s.py();
    if !s.sink().receive_waits(s.conn, s.id)? {
        return Ok(());
    }
    let Some(msg) = message(py, poll(s)?)? else { return Ok(()) };
    s.sink().answer_receive(s.conn, s.id, &msg)
}

/// Where a session stands, for `send`.
enum Stand {
    /// No session for this cycle: it was denied with an HTTP response.
    Gone,
    Handshake,
    Open,
    /// Our close frame is out.
    Closing,
    /// The client closed, or the connection is gone.
    Ended,
}

/// `send(message)` of a WebSocket stream, for the message types `websocket.*`.
pub(crate) fn send(s: Session<'_, '_>, ty: &str, msg: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = s.py();
    let stand = s.with(|p| match p.ws.as_deref().filter(|w| w.stream == s.id) {
        None => Stand::Gone,
        Some(w) if w.ended.is_some() || p.lost => Stand::Ended,
        Some(WsState { phase: Phase::Handshake(_), .. }) => Stand::Handshake,
        Some(WsState { phase: Phase::Open(c), .. }) if c.state() == ws::State::Open => Stand::Open,
        Some(_) => Stand::Closing,
    })?;
    let unexpected = || {
        Err(PyRuntimeError::new_err(format!(
            "Unexpected ASGI message '{ty}', after sending 'websocket.close' or response already completed."
        )))
    };
    match (stand, ty) {
        (Stand::Gone, "websocket.http.response.body") => http_body(s, msg),
        (Stand::Gone, _) => unexpected(),
        (Stand::Handshake, "websocket.accept") => accept(s, msg),
        (Stand::Handshake, "websocket.close") => handshake::refuse(s, 403, None, b""),
        (Stand::Handshake, "websocket.http.response.start") => {
            let status: u16 = match msg.get_item(intern!(py, "status"))? {
                Some(s) => s.extract().map_err(|_| PyTypeError::new_err(format!("Invalid HTTP status code '{s}' in response.")))?,
                None => return Err(PyValueError::new_err("websocket.http.response.start without a 'status'")),
            };
            let headers = msg.get_item(intern!(py, "headers"))?.map(Bound::unbind);
            s.with(|p| *p.ws = None)?;
            s.sink().start(s.conn, s.id, status, headers)
        }
        (Stand::Handshake, t) => Err(PyRuntimeError::new_err(format!(
            "Expected ASGI message 'websocket.accept', 'websocket.close', or 'websocket.http.response.start', but got '{t}'."
        ))),
        (Stand::Open, "websocket.send") => send_message(s, msg),
        (Stand::Open, "websocket.close") => close(s, msg),
        // ASGI 2.4: sending to a client that has gone raises an OSError (`ClientDisconnected`);
        // closing a session the client already closed has nothing left to do.
        (Stand::Ended, "websocket.close") => Ok(()),
        (Stand::Ended, "websocket.send") => Err(ClientDisconnected::new_err("the client disconnected")),
        (Stand::Closing, "websocket.send" | "websocket.close") => unexpected(),
        (_, t) => Err(PyRuntimeError::new_err(format!("Expected ASGI message 'websocket.send' or 'websocket.close', but got '{t}'."))),
    }
}

/// `websocket.http.response.body`: the denial's body (its start came first).
fn http_body(s: Session<'_, '_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = s.py();
    let body = match msg.get_item(intern!(py, "body"))? {
        None => PyBytes::new(py, b""),
        Some(b) => message::body_bytes(b)?,
    };
    let more = msg.get_item(intern!(py, "more_body"))?.map(|m| m.is_truthy()).transpose()?.unwrap_or(false);
    s.sink().body(s.conn, s.id, &body, more)
}

/// `websocket.accept`: the 101 with the subprotocol the application chose and its headers.
fn accept(s: Session<'_, '_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = s.py();
    let subprotocol: Option<String> = match msg.get_item(intern!(py, "subprotocol"))? {
        None => None,
        Some(s) if s.is_none() => None,
        Some(s) => Some(s.extract().map_err(|_| PyTypeError::new_err("websocket.accept's 'subprotocol' must be a str or None"))?),
    };
    let fields = match msg.get_item(intern!(py, "headers"))? {
        Some(h) if !h.is_none() => message::header_fields(&h)?,
        _ => Vec::new(),
    };
    if handshake::switch(s, subprotocol.as_deref(), &fields)? {
        handshake::accepted(s)?;
        s.queue_flush()?;
        super::process(s)?;
    }
    Ok(())
}

/// `websocket.send`: one message, text or bytes.
fn send_message(s: Session<'_, '_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = s.py();
    let bytes = msg.get_item(intern!(py, "bytes"))?.filter(|b| !b.is_none());
    let text = msg.get_item(intern!(py, "text"))?.filter(|t| !t.is_none());
    // The payload as a slice, taken out of the application's objects before the borrow (a
    // buffer that is not `bytes` is copied).
    let copied;
    let payload: Result<&[u8], &str> = match (&bytes, &text) {
        (Some(b), _) => match b.cast::<PyBytes>() {
            Ok(b) => Ok(b.as_bytes()),
            Err(_) => {
                let v = pyo3::buffer::PyBuffer::<u8>::get(b).map_err(|_| PyTypeError::new_err("websocket.send's 'bytes' must be bytes"))?;
                copied = v.to_vec(py)?;
                Ok(&copied)
            }
        },
        (None, Some(t)) => Err(t.cast::<PyString>().map_err(|_| PyTypeError::new_err("websocket.send's 'text' must be a str"))?.to_str()?),
        (None, None) => return Err(PyValueError::new_err("websocket.send needs 'bytes' or 'text'")),
    };
    let sent = s.with(|p| {
        let c = p.ws.as_deref_mut().and_then(WsState::conn)?;
        Some(match payload {
            Ok(b) => c.send_binary(p.out, b),
            Err(t) => c.send_text(p.out, t),
        })
    })?;
    let Some(sent) = sent else { return Ok(()) };
    sent.map_err(|e| PyRuntimeError::new_err(format!("websocket.send refused: {e}")))?;
    super::frames_added(s)
}

/// `websocket.close`: our close frame with the application's code and reason; the session
/// ends when the client answers (or the close timeout passes).
fn close(s: Session<'_, '_>, msg: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = s.py();
    let code: u16 = match msg.get_item(intern!(py, "code"))? {
        Some(c) if !c.is_none() => c.extract().map_err(|_| PyValueError::new_err(format!("websocket.close: invalid code {c}")))?,
        _ => ws::code::NORMAL,
    };
    let reason: String = match msg.get_item(intern!(py, "reason"))? {
        Some(r) if !r.is_none() => r.extract().map_err(|_| PyTypeError::new_err("websocket.close's 'reason' must be a str"))?,
        _ => String::new(),
    };
    let closed = s.with(|p| p.ws.as_deref_mut().map(|w| w.try_close(p.out, code, &reason)))?;
    match closed {
        None => return Ok(()),
        Some(Ok(()) | Err(ws::SendError::Closing)) => {}
        Some(Err(e)) => return Err(PyValueError::new_err(format!("websocket.close: {} (code {code}, reason of {} bytes)", e, reason.len()))),
    }
    s.queue_flush()?;
    // The application may not read again: the channel reads the client's answer itself.
    super::drain(s)
}

/// The application of the stream ended (`error`: it raised): an open session closes; one
/// still in its handshake gets the 500 with a log line. `false`: no session (the upgrade was
/// denied with an HTTP response), the stream is an HTTP one.
pub(crate) fn ended(s: Session<'_, '_>, error: bool) -> PyResult<bool> {
    let py = s.py();
    let handshake = s.with(|p| match p.ws.as_deref().filter(|w| w.stream == s.id) {
        None => None,
        Some(w) => {
            let h = matches!(w.phase, Phase::Handshake(_));
            if h {
                *p.ws = None;
            }
            Some(h)
        }
    })?;
    match handshake {
        None => Ok(false),
        Some(false) => {
            super::app_ended(s, error)?;
            Ok(true)
        }
        Some(true) => {
            if !error {
                s.sink().log_error(s.conn, "ASGI callable returned without sending handshake.".to_owned(), py.None().bind(py))?;
            }
            s.sink().fail(s.conn, s.id, 500, "websocket-no-handshake")?;
            Ok(true)
        }
    }
}
