//! The driver's side of a stream, whatever the interface: the `Cycle` a connection holds from
//! a request head until its response ends, reading the request body for the application
//! (`poll_body`, `answer_receiver`), and writing the response (`early_hint`, `record_start`,
//! `write_head`, `write_body`, `trailers`, `end`, `abandon`, `end_with_error`). ASGI's
//! `receive`/`send` (`asgi`), the native handler API (`native`) and the WSGI bridge reach
//! these through their `Stream`'s `Sink` (`sink.rs`).
//!
//! The head is held until the first body or the end of the loop iteration, whichever comes
//! first: a head, a body known whole and its `content-length` leave together, and a response
//! that starts and then waits (server-sent events, long polling) shows its head at once, as
//! uvicorn's does (`head_due`, written by `HttpConn::flush`). A large body is written from the
//! application's own `bytes`
//! (framed by `h1`, not copied). `write_body` on a connection the client has closed raises
//! `ClientDisconnected` (an `OSError`), as ASGI spec 2.4 asks.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{PyTraverseError, PyVisit};

use super::{ConnState, HttpConn};
use crate::http::body::Collected;
use crate::http::proto::h1::encode::check_field;
use crate::http::proto::h1::{After, Event, Version};
use crate::http::request::HeadCopy;
use crate::http::stream::message::{body_message, disconnect, header_fields, resolve, ClientDisconnected, Got};
use crate::http::stream::InFlight;

/// Bodies at least this large are written from the application's own `bytes`.
const COPY_BELOW: usize = 16 * 1024;

/// One request and its response, from its head until the response ends.
pub(crate) struct Cycle {
    pub(crate) id: u64,
    pub(crate) method: Py<PyString>,
    pub(crate) path: Py<PyString>,
    pub(crate) query: Py<PyBytes>,
    pub(crate) version: Py<PyString>,
    /// When the head was read (CLOCK_MONOTONIC ns), for the access log's duration.
    pub(crate) begun: u64,
    /// `http.response.start` seen: the status, and its headers until the head is written.
    pub(crate) start_seen: bool,
    pub(crate) status: u16,
    headers: Option<Py<PyAny>>,
    /// Bytes of the response head were produced.
    pub(crate) started: bool,
    pub(crate) complete: bool,
    /// Body bytes written (for the access log).
    pub(crate) sent: u64,
    body_done: bool,
    pub(crate) receive_waiter: Option<Py<PyAny>>,
    /// Body arrived while `receive` waits (set by `conn`, acted on after its borrow).
    pub(crate) wake: bool,
    /// A synchronous native handler's request, waiting for its whole body (`collected`).
    pub(crate) pending: Option<Py<PyAny>>,
    pub(crate) collected: Option<Collected>,
    /// The application has the `websocket` scope (`websocket`).
    pub(crate) websocket: bool,
    /// The request said `te: trailers` (HTTP/1.1): trailers go after a chunked body.
    te_trailers: bool,
    /// `http.response.start` said `trailers: True`: the last body does not end the response,
    /// the last `http.response.trailers` does (`trailers`); their fields so far.
    pub(crate) expect_trailers: bool,
    trailer_fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The application's last body was given while trailers are still to come.
    body_ended: bool,
    /// Counted in the worker's requests in flight while the cycle lives.
    _in_flight: InFlight,
}

impl Cycle {
    pub(crate) fn new(id: u64, head: &HeadCopy, py: Python<'_>, in_flight: InFlight) -> Cycle {
        Cycle {
            id,
            method: head.method.clone_ref(py),
            path: head.path.clone_ref(py),
            query: head.query.clone_ref(py),
            version: head.http_version(py),
            begun: crate::reactor::sys::monotonic_ns(),
            start_seen: false,
            status: 0,
            headers: None,
            started: false,
            complete: false,
            sent: 0,
            body_done: false,
            receive_waiter: None,
            wake: false,
            pending: None,
            collected: None,
            websocket: false,
            te_trailers: head.te_trailers,
            expect_trailers: false,
            trailer_fields: Vec::new(),
            body_ended: false,
            _in_flight: in_flight,
        }
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.method)?;
        visit.call(&self.path)?;
        visit.call(&self.query)?;
        visit.call(&self.version)?;
        visit.call(&self.headers)?;
        visit.call(&self.pending)?;
        visit.call(&self.receive_waiter)
    }
}

/// The cycle `id` of `st`, if it is still the current one.
pub(crate) fn current(st: &mut ConnState, id: u64) -> Option<&mut Cycle> {
    st.cycle.as_mut().filter(|c| c.id == id)
}

/// What `drain_body` found.
pub(crate) enum Drained {
    /// Nothing yet.
    Wait,
    /// The body cannot be read (the client left, the response ended, the body was refused).
    Disconnect,
    /// Body bytes were given to the sink (`done`: all of it; may be none and done).
    Read { done: bool },
}

/// Give what the request body has buffered to `sink`, piece by piece, straight from h1's
/// buffer (answering `Expect: 100-continue` first). `sink` runs inside the connection's
/// borrow: no Python code.
pub(crate) fn drain_body(conn: &Bound<'_, HttpConn>, id: u64, mut sink: impl FnMut(&mut Cycle, &[u8])) -> PyResult<Drained> {
    let py = conn.py();
    let this = conn.get();
    let mut flush_continue = false;
    let mut error: Option<(u16, &'static str)> = None;
    let drained = {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let lost = st.lost;
        let Some(c) = current(st, id) else { return Ok(Drained::Disconnect) };
        if c.complete || lost {
            return Ok(Drained::Disconnect);
        }
        if c.body_done {
            return Ok(if st.h1.peer_closed() { Drained::Disconnect } else { Drained::Wait });
        }
        let mut any = false;
        let mut done = false;
        loop {
            match st.h1.poll() {
                Ok(Event::Continue) => {
                    HttpConn::push_continue(st);
                    flush_continue = true;
                }
                Ok(Event::Data(d)) => {
                    any = true;
                    // `d` borrows h1; the cycle is another field of the state.
                    if let Some(c) = st.cycle.as_mut() {
                        sink(c, d);
                    }
                }
                Ok(Event::End) | Ok(Event::Paused) => {
                    done = true;
                    break;
                }
                Ok(Event::NeedData) => break,
                Ok(_) => return Ok(Drained::Disconnect),
                Err(e) => {
                    error = Some((e.status(), e.rule()));
                    break;
                }
            }
        }
        if error.is_some() {
            Drained::Disconnect
        } else {
            let c = current(st, id).expect("checked above");
            c.body_done = done;
            st.since = crate::reactor::sys::monotonic_ns();
            if any || done {
                Drained::Read { done }
            } else {
                Drained::Wait
            }
        }
    };
    if let Some((status, rule)) = error {
        // A body the protocol refuses (too large, bad chunking): its answer, and the end.
        end_with_error(conn, id, status, rule)?;
    }
    if flush_continue && this.st.borrow(py)?.cycle.is_some() {
        HttpConn::flush(conn)?;
    }
    Ok(drained)
}

/// Read what the request body has buffered as one `bytes` (ASGI `receive`), or tell that
/// `receive` must wait.
pub(crate) fn poll_body(conn: &Bound<'_, HttpConn>, id: u64) -> PyResult<Got> {
    let py = conn.py();
    // One piece becomes the message's `bytes` as is; more are joined.
    let mut first: Option<Py<PyBytes>> = None;
    let mut joined: Vec<u8> = Vec::new();
    let drained = drain_body(conn, id, |_, d| match &first {
        None => first = Some(PyBytes::new(py, d).unbind()),
        Some(f) => {
            if joined.is_empty() {
                joined.extend_from_slice(f.bind(py).as_bytes());
            }
            joined.extend_from_slice(d);
        }
    })?;
    Ok(match drained {
        Drained::Wait => Got::Wait,
        Drained::Disconnect => Got::Disconnect,
        Drained::Read { done } => {
            let body = match first {
                None => PyBytes::new(py, b"").unbind(),
                Some(f) if joined.is_empty() => f,
                Some(_) => PyBytes::new(py, &joined).unbind(),
            };
            Got::Body(body, !done)
        }
    })
}

/// A `receive` waits and something happened (body, EOF, response end, disconnect): answer it
/// if it can be answered now.
pub(crate) fn answer_receiver(conn: &Bound<'_, HttpConn>) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let (id, websocket) = match this.st.borrow(py)?.cycle.as_ref() {
        Some(c) if c.receive_waiter.is_some() => (c.id, c.websocket),
        _ => return Ok(()),
    };
    if websocket {
        return crate::http::websocket::asgi::answer_receiver(crate::http::websocket::Session::new(conn.as_any(), id, &super::SINK));
    }
    let msg = match poll_body(conn, id)? {
        Got::Wait => return Ok(()),
        Got::Disconnect => disconnect(py)?,
        Got::Body(b, more) => body_message(py, b, more)?,
    };
    let waiter = {
        let mut st = this.st.borrow_mut(py)?;
        current(&mut st, id).and_then(|c| c.receive_waiter.take())
    };
    if let Some(w) = waiter {
        resolve(w.bind(py), &msg)?;
    }
    HttpConn::flush(conn)
}

/// The cycle is over (response ended or connection lost): a `receive` still waiting learns
/// of the disconnect.
pub(crate) fn cycle_over(py: Python<'_>, mut c: Cycle) -> PyResult<()> {
    if let Some(w) = c.receive_waiter.take() {
        let msg = if c.websocket { crate::http::websocket::asgi::disconnect(py, crate::http::proto::ws::code::ABNORMAL, "")? } else { disconnect(py)? };
        resolve(w.bind(py), &msg)?;
    }
    Ok(())
}

/// End cycle `id` with the server's own error answer (when no response byte was written yet)
/// and close the connection.
pub(crate) fn end_with_error(conn: &Bound<'_, HttpConn>, id: u64, status: u16, rule: &'static str) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let ended = this.with_stamp(py, |st, stamp| {
        let Some(c) = current(st, id) else { return false };
        if c.complete {
            return false;
        }
        c.complete = true;
        c.status = if c.started { c.status } else { status };
        st.h1.write_error(&mut st.out, status, stamp);
        true
    })?;
    if let (true, Some(debug)) = (ended, &this.server.get().log_debug) {
        let client = this.st.borrow(py)?.client.clone_ref(py);
        debug.call1(py, (format!("request answered with {status}: {rule}"), client))?;
    }
    if ended {
        HttpConn::response_ended(conn, After::Close)?;
    }
    HttpConn::linger_when_flushed(conn)
}

/// The cycle whose `http.response.start` is recorded but not written yet.
pub(crate) fn head_due(st: &ConnState) -> Option<u64> {
    st.cycle.as_ref().filter(|c| c.start_seen && !c.started && !c.complete).map(|c| c.id)
}

/// `http.response.start` (or a native response's status line): recorded, written with the
/// first body or at the end of the loop iteration (see the module docs).
pub(crate) fn record_start(conn: &Bound<'_, HttpConn>, id: u64, status: u16, headers: Option<Py<PyAny>>) -> PyResult<()> {
    if !(100..=999).contains(&status) {
        return Err(PyValueError::new_err(format!("Invalid HTTP status code '{status}' in response.")));
    }
    let py = conn.py();
    let mut st = conn.get().st.borrow_mut(py)?;
    let Some(c) = current(&mut st, id) else { return Ok(()) };
    if c.start_seen {
        return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.start' sent, after response already started."));
    }
    c.start_seen = true;
    c.status = status;
    c.headers = headers;
    drop(st);
    HttpConn::queue_flush(conn)
}

/// The response head (once): status and the application's fields, framed by `h1` with
/// `body_len` when the whole body is known.
pub(crate) fn write_head(conn: &Bound<'_, HttpConn>, id: u64, body_len: Option<u64>) -> PyResult<bool> {
    let py = conn.py();
    let conn = conn.get();
    let (status, headers) = {
        let mut st = conn.st.borrow_mut(py)?;
        let Some(c) = current(&mut st, id) else { return Ok(false) };
        if c.started {
            return Ok(true);
        }
        // Kept until written: a head the end of the iteration fails to write (invalid fields)
        // fails again, to the application, at its first body.
        (c.status, c.headers.as_ref().map(|h| h.clone_ref(py)))
    };
    // The fields as `bytes`, taken out of the application's objects before the borrow.
    let fields = match headers {
        Some(h) => header_fields(h.bind(py))?,
        None => Vec::new(),
    };
    let defaults = &conn.server.get().default_headers;
    conn.write_stamped(py, |st, stamp| {
        let st = &mut *st;
        if current(st, id).is_none() {
            return Ok(false);
        }
        let mut r = st.h1.response(&mut st.out, status)?;
        for (n, v) in &fields {
            r.header(n.as_bytes(), v.as_bytes())?;
        }
        // `--header` fields the application did not set itself (its own value wins).
        for (n, v) in defaults {
            if !fields.iter().any(|(f, _)| f.as_bytes().eq_ignore_ascii_case(n)) {
                r.header(n, v)?;
            }
        }
        r.end(body_len, stamp)?;
        if let Some(c) = current(st, id) {
            c.started = true;
            c.headers = None;
        }
        Ok(true)
    })
}

/// Body bytes of the response (`more`: not the last), written behind the head.
pub(crate) fn write_body(conn: &Bound<'_, HttpConn>, id: u64, body: &Bound<'_, PyBytes>, more: bool) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let (trailers, chunked);
    {
        let mut st = this.st.borrow_mut(py)?;
        let lost = st.lost;
        match current(&mut st, id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.body' sent, after response already completed.")),
            Some(c) if !c.start_seen => {
                return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.body'."))
            }
            Some(c) if c.complete || c.body_ended => {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.body' sent, after response already completed."))
            }
            Some(_) if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            Some(c) => {
                c.sent += body.as_bytes().len() as u64;
                c.body_ended = !more;
                trailers = c.expect_trailers;
                // Trailers the client takes need a chunked body: its length is not given.
                chunked = trailers && c.te_trailers;
            }
        }
    }
    let len = body.as_bytes().len();
    if !write_head(conn, id, (!more && !chunked).then_some(len as u64))? {
        return Ok(());
    }
    if len >= COPY_BELOW {
        let after = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            st.h1.frame_body(&mut st.out, len).map_err(|e| PyValueError::new_err(format!("invalid response body: {e}")))?
        };
        if let Some(after) = after {
            HttpConn::write_large_body(conn, body, after)?;
        }
    } else if len > 0 {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        st.h1.write_body(&mut st.out, body.as_bytes()).map_err(|e| PyValueError::new_err(format!("invalid response body: {e}")))?;
    }
    if !more && !trailers {
        end(conn, id)?;
    } else {
        HttpConn::queue_flush(conn)?;
    }
    Ok(())
}

/// `http.response.trailers` (`more`: more follow): the fields gathered; the last message
/// ends the response, with them after the last chunk if the client said `te: trailers` and
/// the body is chunked, else without them (`h1::Conn::end_response_with_trailers`).
pub(crate) fn trailers(conn: &Bound<'_, HttpConn>, id: u64, headers: Option<Py<PyAny>>, more: bool) -> PyResult<()> {
    let py = conn.py();
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Some(h) = &headers {
        for (n, v) in header_fields(h.bind(py))? {
            // Refused now, to the application, as a head's fields are.
            check_field(n.as_bytes(), v.as_bytes()).map_err(|e| PyValueError::new_err(format!("invalid response trailers: {e}")))?;
            fields.push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
    }
    {
        let mut st = conn.get().st.borrow_mut(py)?;
        let lost = st.lost;
        match current(&mut st, id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.trailers' sent, after response already completed.")),
            Some(_) if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            Some(c) if !c.expect_trailers || c.complete => {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.trailers' sent, without 'trailers': True or after the last one."))
            }
            Some(c) => {
                c.trailer_fields.extend(fields);
                if more {
                    return Ok(());
                }
                c.body_ended = true;
            }
        }
    }
    // No body was sent: the head goes now (chunked, for the trailers).
    let chunked = current(&mut *conn.get().st.borrow_mut(py)?, id).is_some_and(|c| c.te_trailers);
    if !write_head(conn, id, (!chunked).then_some(0))? {
        return Ok(());
    }
    let after = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(c) = current(st, id) else { return Ok(()) };
        c.complete = true;
        let fields = std::mem::take(&mut c.trailer_fields);
        let ended = if c.te_trailers {
            st.h1.end_response_with_trailers(&mut st.out, fields.iter().map(|(n, v)| (&n[..], &v[..])))
        } else {
            st.h1.end_response(&mut st.out)
        };
        ended.unwrap_or(After::Close)
    };
    HttpConn::response_ended(conn, after)
}

/// `http.response.pathsend`: the head for a file of `size` bytes, its framing written; `false`
/// when the cycle is over (nothing to send).
pub(crate) fn write_file_head(conn: &Bound<'_, HttpConn>, id: u64, size: u64) -> PyResult<bool> {
    let py = conn.py();
    {
        let mut st = conn.get().st.borrow_mut(py)?;
        match current(&mut st, id) {
            Some(c) if c.start_seen && !c.complete => c.sent += size,
            Some(_) => return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.pathsend'.")),
            None => return Ok(false),
        }
    }
    if !write_head(conn, id, Some(size))? {
        return Ok(false);
    }
    let framed = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let st = &mut *st;
        st.h1.frame_body(&mut st.out, size as usize).map_err(|e| PyValueError::new_err(format!("invalid response body: {e}")))?.is_some()
    };
    HttpConn::flush(conn)?;
    Ok(framed)
}

/// End the response (the last chunk, if chunked) and go on.
pub(crate) fn end(conn: &Bound<'_, HttpConn>, id: u64) -> PyResult<()> {
    let py = conn.py();
    let after = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(c) = current(st, id) else { return Ok(()) };
        c.complete = true;
        match st.h1.end_response(&mut st.out) {
            Ok(a) => a,
            Err(_) => After::Close,
        }
    };
    HttpConn::response_ended(conn, after)
}

/// The application ended the cycle unfinished: the server's 500 if nothing was written,
/// else the connection closes (the client cannot tell a cut response otherwise).
pub(crate) fn abandon(conn: &Bound<'_, HttpConn>, id: u64) -> PyResult<()> {
    let py = conn.py();
    let started = {
        let mut st = conn.get().st.borrow_mut(py)?;
        match current(&mut st, id) {
            Some(c) if !c.complete => c.started,
            _ => return Ok(()),
        }
    };
    if started {
        {
            let mut st = conn.get().st.borrow_mut(py)?;
            if let Some(c) = current(&mut st, id) {
                c.complete = true;
            }
            st.h1.set_close();
        }
        HttpConn::response_ended(conn, After::Close)?;
        return HttpConn::close_when_flushed(conn);
    }
    end_with_error(conn, id, 500, "application-error")
}

/// `http.response.early_hint`: `103 Early Hints` with a `link` field per entry, ahead of the
/// final head (which waits for `start`). Not to an HTTP/1.0 client: dropped (RFC 8297 §3).
pub(crate) fn early_hint(conn: &Bound<'_, HttpConn>, id: u64, links: &[Vec<u8>]) -> PyResult<()> {
    let py = conn.py();
    {
        let mut st = conn.get().st.borrow_mut(py)?;
        let lost = st.lost;
        let v10 = st.h1.version() == Version::Http10;
        match current(&mut st, id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.early_hint' sent, after response already completed.")),
            Some(_) if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            Some(c) if c.start_seen => {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.early_hint' sent, after response already started."))
            }
            Some(_) if v10 => return Ok(()),
            Some(_) => {}
        }
    }
    conn.get().write_stamped(py, |st, stamp| {
        let st = &mut *st;
        let mut r = st.h1.response(&mut st.out, 103)?;
        for l in links {
            r.header(b"link", l)?;
        }
        r.end(None, stamp)
    })?;
    HttpConn::queue_flush(conn)
}
