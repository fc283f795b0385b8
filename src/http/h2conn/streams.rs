//! One request on an HTTP/2 connection as the driver keeps it (`Strm`), and its body in.
//!
//! The body: the core delivers a stream's DATA as it comes (`want_body` at `Request`), and it
//! waits here until the application's `receive()` takes it (`poll_body`). Credit goes back to
//! the client (`release`, a WINDOW_UPDATE) only then: a stream whose application does not
//! read holds at most its window (`--http2-initial-stream-window-size`), a connection at most
//! its own, and a slow reader slows its own client only.

use std::collections::VecDeque;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{PyTraverseError, PyVisit};

use super::H2Conn;
use crate::http::body::Collected;
use crate::http::request::HeadCopy;
use crate::http::websocket::WsState;
use crate::http::stream::message::{body_message, disconnect, resolve, Got};
use crate::http::stream::InFlight;

/// A request from its `Request` event until its response ended (or, reset, until its
/// application ended).
pub(crate) struct Strm {
    pub(crate) method: Py<PyString>,
    pub(crate) path: Py<PyString>,
    pub(crate) query: Py<PyBytes>,
    /// When the head arrived (CLOCK_MONOTONIC ns), for the access log.
    pub(crate) begun: u64,
    /// `Sink::open` made it the application's (counted in flight from then, until its
    /// response ended or, for a WebSocket session, its application let it go).
    pub(crate) in_flight: Option<InFlight>,
    opened: bool,
    /// An extended CONNECT (RFC 8441) with its WebSocket session, from the session's start
    /// (`ws.rs`).
    pub(crate) ws: Option<Box<WsStream>>,
    /// `http.response.start` seen: the status, and its fields until the head is sent.
    pub(crate) start_seen: bool,
    pub(crate) status: u16,
    pub(crate) headers: Option<Py<PyAny>>,
    /// The response head went to the core.
    pub(crate) started: bool,
    /// Body bytes the application gave (access log).
    pub(crate) sent: u64,
    /// The client reset the stream, or the connection ended under it.
    pub(crate) reset: bool,
    /// Body received and not taken by `receive()` yet, and whether its end arrived.
    body: VecDeque<Bytes>,
    body_end: bool,
    /// The end was handed to the application (`more_body: False`).
    body_done: bool,
    pub(crate) receive_waiter: Option<Py<PyAny>>,
    /// Response bytes the windows have not taken yet, and whether the last of them ends the
    /// response (`respond.rs`).
    pub(crate) pending: Option<(Bytes, bool)>,
    /// Since when `pending` has waited without a byte taken (CLOCK_MONOTONIC ns): past
    /// `--http2-send-timeout` the stream is reset (`lifecycle.rs`).
    pub(crate) pending_since: u64,
    /// What a `send()` awaits while `pending` is not empty.
    pub(crate) drain: Option<Py<PyAny>>,
    /// A synchronous native handler's request, waiting for its whole body.
    pub(crate) collect: Option<(Py<PyAny>, Collected)>,
    /// A static file's body still to send: the file, the offset and the bytes left
    /// (`files.rs`).
    pub(crate) file: Option<(std::fs::File, u64, u64)>,
    /// What the watch charges a block in this stream to (its scope or `Request`), kept only
    /// while the server tracks requests (`watch.rs`).
    pub(crate) subject: Option<Py<PyAny>>,
    /// The application's last body was given (`more_body: False`).
    pub(crate) body_ended: bool,
    /// `http.response.start` said `trailers: True`: the last body does not end the stream,
    /// the trailers do (`respond::trailers`): their fields so far, and whether the last
    /// trailers message came (they go once the body has left).
    pub(crate) expect_trailers: bool,
    pub(crate) trailer_fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) trailers_ready: bool,
    /// The request said `te: trailers`: trailers are sent; without it they are dropped (the
    /// stream ends with an empty DATA instead), as the extension was not announced.
    pub(crate) te_trailers: bool,
}

impl Strm {
    pub(crate) fn new(py: Python<'_>, head: &HeadCopy) -> Strm {
        Strm {
            method: head.method.clone_ref(py),
            path: head.path.clone_ref(py),
            query: head.query.clone_ref(py),
            begun: crate::reactor::sys::monotonic_ns(),
            in_flight: None,
            opened: false,
            ws: None,
            pending_since: 0,
            start_seen: false,
            status: 0,
            headers: None,
            started: false,
            sent: 0,
            reset: false,
            body: VecDeque::new(),
            body_end: false,
            body_done: false,
            receive_waiter: None,
            pending: None,
            drain: None,
            collect: None,
            file: None,
            subject: None,
            body_ended: false,
            expect_trailers: false,
            trailer_fields: Vec::new(),
            trailers_ready: false,
            te_trailers: head.te_trailers,
        }
    }

    pub(crate) fn opened(&self) -> bool {
        self.opened
    }

    /// Count it in flight: the application has it (`Sink::open`).
    pub(crate) fn open(&mut self, in_flight: InFlight) {
        self.in_flight = Some(in_flight);
        self.opened = true;
    }

    /// Everything buffered, and whether the end came: a WebSocket session's first bytes
    /// (what the client sent before the `200`), taken when the session opens.
    pub(crate) fn take_all_body(&mut self) -> (Vec<u8>, bool) {
        let mut all = Vec::with_capacity(self.body.iter().map(Bytes::len).sum());
        for c in self.body.drain(..) {
            all.extend_from_slice(&c);
        }
        (all, self.body_end)
    }

    /// Body bytes from the core (`end`: the body is complete).
    pub(crate) fn arrived(&mut self, data: Bytes, end: bool) {
        if !data.is_empty() {
            self.body.push_back(data);
        }
        self.body_end |= end;
    }

    /// Take what is buffered: the bytes, how many, and whether the body is now complete.
    /// `None` when there is nothing to say (no bytes, and the end not reached or already told).
    fn take_body(&mut self) -> Option<(Vec<Bytes>, usize, bool)> {
        if self.body.is_empty() && (!self.body_end || self.body_done) {
            return None;
        }
        let chunks: Vec<Bytes> = self.body.drain(..).collect();
        let n = chunks.iter().map(Bytes::len).sum();
        self.body_done = self.body_end;
        Some((chunks, n, self.body_end))
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.method)?;
        visit.call(&self.path)?;
        visit.call(&self.query)?;
        visit.call(&self.headers)?;
        visit.call(&self.receive_waiter)?;
        visit.call(&self.drain)?;
        visit.call(&self.subject)?;
        if let Some(w) = &self.ws {
            w.traverse(visit)?;
        }
        if let Some((r, _)) = &self.collect {
            visit.call(r)?;
        }
        Ok(())
    }
}

/// What the request body of stream `id` has for `receive()` now; the bytes taken are the
/// client's credit again (see the module docs).
pub(crate) fn poll_body(conn: &Bound<'_, H2Conn>, id: u64) -> PyResult<Got> {
    let py = conn.py();
    let this = conn.get();
    let taken = {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let lost = st.lost;
        let Some(s) = st.streams.get_mut(&(id as u32)) else { return Ok(Got::Disconnect) };
        if s.reset || lost {
            return Ok(Got::Disconnect);
        }
        let Some((chunks, n, end)) = s.take_body() else { return Ok(Got::Wait) };
        if n > 0 {
            st.core.release(id as u32, n);
        }
        (chunks, n, end)
    };
    let (chunks, n, end) = taken;
    let body = match chunks.as_slice() {
        [] => PyBytes::new(py, b""),
        [one] => PyBytes::new(py, one),
        many => {
            let mut joined = Vec::with_capacity(n);
            for c in many {
                joined.extend_from_slice(c);
            }
            PyBytes::new(py, &joined)
        }
    };
    if n > 0 {
        // The WINDOW_UPDATE leaves with this iteration's output.
        H2Conn::queue_flush(conn)?;
    }
    Ok(Got::Body(body.unbind(), !end))
}

/// Body arrived for stream `id`: a `receive` that waits gets it, a native handler collecting
/// its body whole gets it when complete.
pub(crate) fn answer_receiver(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let (waits, collects, session) = match this.st.borrow(py)?.streams.get(&id) {
        Some(s) => (s.receive_waiter.is_some(), s.collect.is_some(), is_session(s)),
        None => return Ok(()),
    };
    if session {
        // A session's bytes are the codec's (`ws::process`, which `H2Conn::act` calls for it).
        return Ok(());
    }
    if collects {
        return collect(conn, id);
    }
    if !waits {
        return Ok(());
    }
    let msg = match poll_body(conn, id as u64)? {
        Got::Wait => return Ok(()),
        Got::Disconnect => disconnect(py)?,
        Got::Body(b, more) => body_message(py, b, more)?,
    };
    let waiter = this.st.borrow_mut(py)?.streams.get_mut(&id).and_then(|s| s.receive_waiter.take());
    if let Some(w) = waiter {
        resolve(w.bind(py), &msg)?;
    }
    Ok(())
}

/// Gather a synchronous native handler's body; call it once whole (`Dispatch::collected`).
pub(crate) fn collect(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let ready = {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        if s.reset {
            return Ok(());
        }
        let Some((chunks, n, end)) = s.take_body() else { return Ok(()) };
        if let Some((_, buf)) = s.collect.as_mut() {
            for c in &chunks {
                buf.push(py, c);
            }
        }
        if n > 0 {
            st.core.release(id, n);
        }
        if end {
            s.collect.take()
        } else {
            None
        }
    };
    H2Conn::queue_flush(conn)?;
    if let Some((request, body)) = ready {
        let dispatch = crate::http::dispatch(this.server.get().interface);
        let at = crate::http::stream::Opening { conn: conn.as_any(), sink: &super::SINK, id: id as u64 };
        dispatch.collected(at, request, body.finish(py))?;
    }
    Ok(())
}

/// A WebSocket session's side of its stream (`Strm::ws`), from `Channel::begin`.
pub(crate) struct WsStream {
    /// The session (`None` once it was refused or denied: the stream is an HTTP one again).
    pub(super) slot: Option<Box<WsState>>,
    /// Frames written under `parts`, handed to the stream right after.
    pub(super) out: Vec<u8>,
    /// Bytes fed to the codec, and credit given back for them (`update_reading`).
    pub(super) fed: usize,
    pub(super) released: usize,
    /// When bytes last arrived (the keep-alive ping's clock).
    pub(super) since: u64,
    /// END_STREAM once what waits has left (`close`).
    pub(super) end_wanted: bool,
    /// END_STREAM went, or the stream was reset: nothing more goes out.
    pub(super) ended: bool,
    /// The application let the stream go (`release`).
    pub(super) app_done: bool,
    /// The client's END_STREAM came before the session opened: the codec's EOF at the start.
    pub(super) eof_at_open: bool,
}

impl WsStream {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self.slot.as_deref().and_then(|w| w.native.as_ref()) {
            Some(n) => visit.call(n),
            None => Ok(()),
        }
    }
}

/// Whether stream `s` carries a session (in its handshake or open).
pub(crate) fn is_session(s: &Strm) -> bool {
    s.ws.as_deref().is_some_and(|w| w.slot.is_some())
}
