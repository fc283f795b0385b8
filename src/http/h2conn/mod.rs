//! `H2Conn`: one HTTP/2 connection, where the sans-I/O core (`proto::h2`) meets the stream
//! transport and the application: a stream per request, many at once.
//!
//! How it begins: `HttpConn` (the HTTP/1.1 driver, the transport's protocol) sees the
//! connection's first bytes; if the TLS session agreed on ALPN `h2`, or the bytes open with the
//! client preface (h2c, "prior knowledge"), or the server speaks only HTTP/2 (`--http 2`), it
//! makes an `H2Conn`, makes it the transport's native protocol (`set_native_protocol`: reads
//! come here from then on, no Python call), hands it those bytes and steps aside — passing on
//! the transport's other calls (EOF, loss, write pauses) and the server's (sweep, shutdown),
//! as it stays the connection the server's registry holds.
//!
//! The data path: `feed` gives the core the bytes; `run` polls it, and for each event acts:
//! a `Request` becomes a stream (`streams.rs`) whose body the core delivers at once (credit is
//! given back only when the application's `receive()` takes it: `release`), and the
//! interface's `Dispatch` starts the application on it (its first step inline, in the host
//! task, or in a task of its own while the host task runs another stream's coroutine);
//! `Data` is buffered for `receive()`; `Writable` lets a `send()` that waited on the stream's
//! window go on (`respond.rs`); `Reset` is that stream's `http.disconnect`; `Closed` ends the
//! connection once its output is written. Output: `take_output` into `out`, written with one
//! send at the end of `run` or of the loop iteration (`FlushAtEnd`).
//!
//! Rooms: this file (state, the transport's calls, `run`), `streams` (one request's state,
//! its body in), `respond` (its response out, the window's back-pressure), `sink` (the `Sink`
//! the interfaces call), `files` (static mounts), `lifecycle` (timeouts, graceful shutdown),
//! `watch` (what `--watch-threshold` reads of its requests), `ws` (a WebSocket session over
//! an extended CONNECT stream, RFC 8441).
//!
//! Invariants (as `conn`'s): no `GilCell` borrow is held while Python code runs or a
//! container object is made (only `str`/`bytes` under a borrow); the application is started
//! only from `run` (a loop callback), never inside another stream's task step; every stream
//! the core opened either gets a `Strm` or is reset.

mod files;
mod lifecycle;
mod respond;
mod sink;
mod streams;
mod watch;
mod ws;

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::{intern, PyTraverseError, PyVisit};

use self::sink::SINK;
use self::streams::Strm;
use super::host::Host;
use super::proto::h2::{Conn, Event, Reason};
use super::request::HeadCopy;
use super::scope::ConnScope;
use super::server::{Interface, ServerState};
use super::websocket::{self, Session};
use super::stream::message::{disconnect, resolve};
use super::stream::{Opening, Spare};
use crate::eventloop::core::LoopCore;
use crate::eventloop::flush::FlushAtEnd;
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::sys::monotonic_ns;
use crate::transport::stream::{NativeProtocol, Received, StreamIO};

/// The client preface (RFC 9113 §3.4) that opens an h2c connection with prior knowledge.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Events handled per batch of `run` (taken under one borrow, acted on after it).
const BATCH: usize = 64;

/// The rounds of poll → act → take output one `run` makes before it leaves the rest to a
/// later callback (`_continue`): the connection cannot keep the loop to itself.
const MAX_ROUNDS: usize = 8;

pub(crate) struct H2State {
    pub(crate) core: Conn,
    /// Output not written yet.
    out: Vec<u8>,
    io: Option<Py<StreamIO>>,
    transport: Option<Py<PyAny>>,
    pub(crate) client: Py<PyAny>,
    pub(crate) local: Py<PyAny>,
    pub(crate) peer_trusted: bool,
    /// The requests in progress, by stream id (from `Request` until the response ended, or
    /// the stream was reset and its application has finished).
    pub(crate) streams: HashMap<u32, Strm>,
    pub(crate) scope: Option<ConnScope>,
    pub(crate) spare: Option<Spare>,
    pub(crate) host: Option<Py<Host>>,
    pub(crate) lost: bool,
    /// The core ended the connection: close once `out` is written.
    closed: bool,
    in_process: bool,
    flush_queued: bool,
    continue_scheduled: bool,
    read_paused: bool,
    pub(crate) write_paused: bool,
    /// `send()`s waiting for the transport's buffer to drain.
    pub(crate) drain_waiters: Vec<Py<PyAny>>,
    /// Since when the connection has had no open stream (the keep-alive timeout's clock).
    pub(crate) since: u64,
    /// When our GOAWAY went out (idle timeout or shutdown), for the abort that follows a
    /// client that never lets the connection end.
    pub(crate) goaway_at: Option<u64>,
    /// Keep-alive PINGs (`lifecycle.rs`).
    pub(crate) ping: lifecycle::KeepAlive,
    /// The requests the watch may need, kept while the server tracks them (`watch.rs`).
    pub(crate) watch: crate::http::stream::records::Records,
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct H2Conn {
    pub(crate) server: Py<ServerState>,
    pub(crate) st: GilCell<H2State>,
}

/// What `run` does for an event, decided under the borrow.
enum Act {
    Start(u32, HeadCopy),
    /// A static file's answer (`files.rs`), without the application.
    Static(u32, crate::http::files::Answer),
    Refused(u32, &'static str),
    /// Body (or its end) arrived for a stream whose `receive` may wait.
    Body(u32),
    /// Bytes (or the end) arrived for a WebSocket session's stream (`ws.rs`).
    Ws(u32),
    Writable(u32),
    Reset(u32),
    Closed(Option<String>),
}

impl H2Conn {
    /// The driver for a connection `HttpConn` hands over (see the module docs).
    pub(crate) fn new(
        py: Python<'_>,
        server: Py<ServerState>,
        io: Option<Py<StreamIO>>,
        transport: Option<Py<PyAny>>,
        client: Py<PyAny>,
        local: Py<PyAny>,
        peer_trusted: bool,
    ) -> PyResult<Py<H2Conn>> {
        let core = Conn::new(&server.get().h2);
        let conn = Py::new(
            py,
            H2Conn {
                server,
                st: GilCell::new(H2State {
                    core,
                    out: Vec::new(),
                    io,
                    transport,
                    client,
                    local,
                    peer_trusted,
                    streams: HashMap::new(),
                    scope: None,
                    spare: None,
                    host: None,
                    lost: false,
                    closed: false,
                    in_process: false,
                    flush_queued: false,
                    continue_scheduled: false,
                    read_paused: false,
                    write_paused: false,
                    drain_waiters: Vec::new(),
                    since: monotonic_ns(),
                    goaway_at: None,
                    ping: lifecycle::KeepAlive::new(monotonic_ns()),
                    watch: crate::http::stream::records::Records::default(),
                }),
            },
        )?;
        if let Some(io) = &conn.get().st.borrow(py)?.io {
            io.get().set_native_protocol(py, conn.clone_ref(py))?;
        }
        Ok(conn)
    }

    pub(crate) fn loop_<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.server.get().loop_.bind(py)
    }

    /// Bytes that arrived (natively, or handed over by `HttpConn`).
    pub(crate) fn feed_bytes(&self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        self.st.borrow_mut(py)?.core.feed(data);
        Ok(())
    }

    /// Act on what the core has to say until it has nothing more (see the module docs).
    pub(crate) fn run(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            if st.in_process {
                return Ok(()); // the `run` below us goes on
            }
            st.in_process = true;
        }
        let r = Self::rounds(slf);
        this.st.borrow_mut(py)?.in_process = false;
        let f = Self::flush(slf);
        r.and(f)?;
        Self::update_reading(slf)
    }

    fn rounds(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        for _ in 0..MAX_ROUNDS {
            loop {
                let acts = Self::poll_batch(slf)?;
                if acts.is_empty() {
                    break;
                }
                for a in acts {
                    Self::act(slf, a)?;
                }
            }
            // The output may open send capacity (and so `Writable`s): poll again if so. Not
            // while the transport is full: `resume_writing` goes on then.
            Self::take_output(this, py)?;
            let st = this.st.borrow(py)?;
            if !st.core.needs_poll() || st.write_paused {
                return Ok(());
            }
        }
        Self::schedule_continue(slf)
    }

    /// Up to `BATCH` events, the state they change changed (body buffered, streams made).
    fn poll_batch(slf: &Bound<'_, Self>) -> PyResult<Vec<Act>> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let mut acts = Vec::new();
        while acts.len() < BATCH {
            let Some(ev) = st.core.poll() else { break };
            match ev {
                Event::Request { id } => {
                    // The body is delivered from now on; the client gets credit back only as
                    // the application takes it (`Strm::take_body`), so what waits here is
                    // bounded by the stream's window all the same.
                    st.core.want_body(id);
                    let Some(head) = st.core.head(id) else { continue };
                    let answer = server.files.get().and_then(|m| m.answer(&files::H2View(head)));
                    let copy = HeadCopy::from_head(py, &head, &server.root_path_bytes, st.scope.as_ref());
                    st.streams.insert(id, Strm::new(py, &copy));
                    acts.push(match answer {
                        Some(a) => Act::Static(id, a),
                        None => Act::Start(id, copy),
                    });
                }
                Event::Refused { id, rule } => acts.push(Act::Refused(id, rule.rule())),
                Event::Data { id, data, end } => {
                    if let Some(s) = st.streams.get_mut(&id) {
                        if streams::is_session(s) {
                            ws::arrived(s, data, end);
                            acts.push(Act::Ws(id));
                        } else {
                            s.arrived(data, end);
                            acts.push(Act::Body(id));
                        }
                    }
                }
                Event::Trailers { id } => {
                    // Request trailers are not given to the application (ASGI has no message
                    // for them): the body is complete.
                    if let Some(s) = st.streams.get_mut(&id) {
                        if streams::is_session(s) {
                            ws::arrived(s, bytes::Bytes::new(), true);
                            acts.push(Act::Ws(id));
                        } else {
                            s.arrived(bytes::Bytes::new(), true);
                            acts.push(Act::Body(id));
                        }
                    }
                }
                Event::Writable { id } => acts.push(Act::Writable(id)),
                Event::Reset { id, .. } => acts.push(Act::Reset(id)),
                Event::Closed { error } => acts.push(Act::Closed(error.map(|e| e.to_string()))),
            }
        }
        Ok(acts)
    }

    fn act(slf: &Bound<'_, Self>, a: Act) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        match a {
            Act::Start(id, head) => Self::start(slf, id, head),
            Act::Static(id, answer) => Self::serve_static(slf, id, answer),
            Act::Refused(id, rule) => Self::log_rule(this, py, &format!("stream {id} reset: {rule}")),
            Act::Body(id) => {
                // Body that came before the stream became a WebSocket session (in the same
                // batch as its head) is the session's: it opens the session (`Channel::switch`).
                if this.st.borrow(py)?.streams.get(&id).is_some_and(streams::is_session) {
                    ws::process(slf, id)
                } else {
                    streams::answer_receiver(slf, id)
                }
            }
            Act::Ws(id) => ws::process(slf, id),
            Act::Writable(id) => {
                respond::writable(slf, id)?;
                ws::writable(slf, id)
            }
            Act::Reset(id) => Self::stream_reset(slf, id),
            Act::Closed(error) => {
                if let Some(e) = error {
                    Self::log_rule(this, py, &format!("connection ended: {e}"))?;
                }
                this.st.borrow_mut(py)?.closed = true;
                Ok(())
            }
        }
    }

    /// Start the application for the request on stream `id`.
    fn start(slf: &Bound<'_, Self>, id: u32, head: HeadCopy) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        // Checked here, as each stream starts, not when its event was polled: the streams
        // before it in the batch count by now.
        if server.limit_concurrency.is_some_and(|l| server.in_flight.load(Ordering::Relaxed) >= l) {
            this.st.borrow_mut(py)?.streams.remove(&id);
            return Self::answer_alone(slf, id, 503, "limit-concurrency");
        }
        let interface = server.interface;
        let r = match interface {
            // RFC 8441: an extended CONNECT with `:protocol websocket` is a WebSocket session
            // over the stream (h2 lets `:protocol` through only where it was announced).
            Interface::Asgi if head.websocket && server.ws.is_some() => {
                websocket::asgi::start(Session::new(slf.as_any(), id as u64, &SINK), &head).map(drop)
            }
            Interface::Native | Interface::NativeAsync if head.websocket && server.ws_handler.is_some() => {
                websocket::native::start(Session::new(slf.as_any(), id as u64, &SINK), &head).map(drop)
            }
            _ => crate::http::dispatch(interface).start(Opening { conn: slf.as_any(), sink: &SINK, id: id as u64 }, &head),
        };
        let unopened = this.st.borrow(py)?.streams.get(&id).is_some_and(|s| !s.opened());
        if unopened {
            // The interface did not take the stream (it failed before `open`): no one will
            // answer it.
            this.st.borrow_mut(py)?.streams.remove(&id);
            Self::answer_alone(slf, id, 500, "not-started")?;
        }
        r
    }

    /// Answer stream `id` with the server's own `status` and no application.
    fn answer_alone(slf: &Bound<'_, Self>, id: u32, status: u16, rule: &'static str) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        respond::error_answer(this, py, id, status)?;
        Self::log_rule(this, py, &format!("request answered with {status}: {rule}"))?;
        Self::queue_flush(slf)
    }

    /// A rule's name at debug level, as `HttpConn::reject` logs h1's.
    pub(crate) fn log_rule(&self, py: Python<'_>, message: &str) -> PyResult<()> {
        if let Some(debug) = &self.server.get().log_debug {
            let client = self.st.borrow(py)?.client.clone_ref(py);
            debug.call1(py, (format!("HTTP/2: {message}"), client))?;
        }
        Ok(())
    }

    /// The client reset stream `id` (or the connection ended under it): its `receive` hears
    /// `http.disconnect`, a `send` waiting on its window wakes (and the next raises
    /// `ClientDisconnected`). The stream is kept, marked, until its application ends.
    fn stream_reset(slf: &Bound<'_, Self>, id: u32) -> PyResult<()> {
        let py = slf.py();
        if slf.get().st.borrow(py)?.streams.get(&id).is_some_and(streams::is_session) {
            ws::gone(slf, id)?;
            return Self::note_idle(slf.get(), py);
        }
        let (receive, drain, forget) = {
            let mut st = slf.get().st.borrow_mut(py)?;
            let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
            s.reset = true;
            let forget = !s.opened();
            (s.receive_waiter.take(), s.drain.take(), forget)
        };
        if forget {
            slf.get().st.borrow_mut(py)?.streams.remove(&id);
        }
        if let Some(w) = receive {
            resolve(w.bind(py), &disconnect(py)?)?;
        }
        if let Some(d) = drain {
            resolve(d.bind(py), py.None().bind(py))?;
        }
        Self::note_idle(slf.get(), py)
    }

    /// No stream open: the keep-alive clock starts.
    pub(crate) fn note_idle(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.st.borrow_mut(py)?;
        if st.core.open_streams() == 0 {
            st.since = monotonic_ns();
        }
        Ok(())
    }

    /// The core's output into `out`.
    ///
    /// Not while the transport's buffer is above its high-water mark (`write_paused`): the
    /// output then stays in the core, which stops reading once it holds
    /// `Settings::max_pending_output`, and reading the socket pauses with it (`wants_read`).
    /// A peer that sends and does not read (PINGs, SETTINGS, requests it never collects the
    /// answers to) so meets a bound instead of filling our buffer with the replies. Taken
    /// again on `resume_writing`.
    fn take_output(this: &H2Conn, py: Python<'_>) -> PyResult<()> {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        if !st.lost && !st.write_paused {
            st.core.take_output(&mut st.out);
        }
        Ok(())
    }

    /// Write `out` at the end of this loop iteration (a task's `send`, a `receive` that gave
    /// credit back).
    pub(crate) fn queue_flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.flush_queued || st.in_process || st.lost {
                return Ok(());
            }
            st.flush_queued = true;
        }
        LoopCore::queue_flush(slf.get().loop_(py).cast::<LoopCore>()?, slf.clone().unbind())
    }

    /// Poll again from a callback of its own: after a `run` that hit its bound, or a call
    /// from inside a task step that gave the core something to act on.
    pub(crate) fn schedule_continue(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.continue_scheduled || st.lost {
                return Ok(());
            }
            st.continue_scheduled = true;
        }
        let cb = slf.getattr(intern!(py, "_continue"))?;
        let loop_ = slf.get().loop_(py).cast::<LoopCore>()?;
        LoopCore::call_soon_impl(loop_, &cb, crate::eventloop::handle::Args::None, None).map(|_| ())
    }

    /// Write what the core produced; close once the core ended the connection.
    pub(crate) fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if !this.st.borrow(py)?.lost {
            // Heads recorded and not sent with a body: a response that starts and then waits
            // shows its head at once, as h1's does. Invalid fields fail the stream's next
            // `send` instead.
            for id in respond::heads_due(this, py)? {
                let _ = respond::write_head(slf, id, false);
            }
        }
        Self::take_output(this, py)?;
        let (out, io, transport, close, poll) = {
            let mut st = this.st.borrow_mut(py)?;
            st.flush_queued = false;
            if st.lost {
                st.out.clear();
                return Ok(());
            }
            let poll = st.core.needs_poll() && !st.in_process && !st.write_paused;
            (std::mem::take(&mut st.out), st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)), st.closed, poll)
        };
        let mut out = out;
        if !out.is_empty() {
            StreamIO::write_to(py, io.as_ref(), transport.as_ref(), &out)?;
            out.clear();
        }
        {
            let mut st = this.st.borrow_mut(py)?;
            if st.out.is_empty() {
                st.out = out;
            }
        }
        if close {
            if let Some(t) = transport {
                t.call_method0(py, intern!(py, "close"))?;
            }
        } else if poll {
            // Taking the output opened send capacity, or a `release` owes the client credit.
            Self::schedule_continue(slf)?;
        }
        Ok(())
    }

    /// Pause the transport's reading while the core holds as much unread input as it may.
    fn update_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (want, paused, transport) = {
            let st = this.st.borrow(py)?;
            (st.core.wants_read() && !st.lost && !st.closed, st.read_paused, st.transport.as_ref().map(|t| t.clone_ref(py)))
        };
        let Some(t) = transport else { return Ok(()) };
        if want != paused {
            return Ok(());
        }
        this.st.borrow_mut(py)?.read_paused = !want;
        let m = if want { intern!(py, "resume_reading") } else { intern!(py, "pause_reading") };
        t.call_method0(py, m)?;
        Ok(())
    }

    // --- the transport's calls, passed on by `HttpConn`

    /// The peer shut its side: the core learns it (it ends the connection once the streams it
    /// has are over). `true`: keep the transport open meanwhile.
    pub(crate) fn eof_received(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let py = slf.py();
        slf.get().st.borrow_mut(py)?.core.feed_eof();
        Self::run(slf)?;
        let st = slf.get().st.borrow(py)?;
        Ok(!st.closed && !st.lost)
    }

    /// The connection is gone: every stream's `receive` hears `http.disconnect`, every waiting
    /// `send` wakes, and the streams are dropped (their count in flight with them).
    pub(crate) fn connection_lost(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut st = this.st.borrow_mut(py)?;
            st.lost = true;
            st.out.clear();
            st.core.abort(Reason::CANCEL);
        }
        // WebSocket sessions hear the end as theirs (1006), native handlers' `on_close` too.
        for id in ws::sessions(this, py)? {
            ws::gone(slf, id)?;
        }
        let (streams, waiters, host, spare, io, transport) = {
            let mut st = this.st.borrow_mut(py)?;
            (std::mem::take(&mut st.streams), std::mem::take(&mut st.drain_waiters), st.host.take(), st.spare.take(), st.io.take(), st.transport.take())
        };
        drop((io, transport));
        for w in waiters {
            resolve(w.bind(py), py.None().bind(py))?;
        }
        for (_, mut s) in streams {
            if let Some(w) = s.receive_waiter.take() {
                resolve(w.bind(py), &disconnect(py)?)?;
            }
            if let Some(d) = s.drain.take() {
                resolve(d.bind(py), py.None().bind(py))?;
            }
        }
        drop(spare);
        if let Some(h) = host {
            h.get().connection_closed(py)?;
        }
        Ok(())
    }

    pub(crate) fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.st.borrow_mut(py)?.write_paused = true;
        Ok(())
    }

    /// The transport's buffer drained: the `send()`s that waited go on, and the core's output
    /// (held meanwhile, see `take_output`) is taken again.
    pub(crate) fn resume_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let waiters = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.write_paused = false;
            std::mem::take(&mut st.drain_waiters)
        };
        for w in waiters {
            resolve(w.bind(py), py.None().bind(py))?;
        }
        Self::run(slf)
    }
}

impl NativeProtocol for H2Conn {
    fn feed(slf: &Bound<'_, Self>, data: Received<'_>) -> PyResult<()> {
        let mut st = slf.get().st.borrow_mut(slf.py())?;
        match data {
            Received::Slice(b) => st.core.feed(b),
            Received::Ring(r) => r.drain_chunks(|c| st.core.feed(c)),
        }
        Ok(())
    }

    fn process(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run(slf)
    }
}

impl FlushAtEnd for H2Conn {
    fn flush_at_end(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::flush(slf)
    }
}

#[pymethods]
impl H2Conn {
    /// Go on polling after a `run` that stopped at its bound (see `schedule_continue`).
    fn _continue(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.get().st.borrow_mut(slf.py())?.continue_scheduled = false;
        Self::run(slf)
    }

    /// Open streams (for tests and the watch).
    #[getter]
    fn open_streams(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.st.borrow(py)?.core.open_streams())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.server)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        visit.call(&st.io)?;
        visit.call(&st.transport)?;
        visit.call(&st.client)?;
        visit.call(&st.local)?;
        visit.call(&st.host)?;
        for w in &st.drain_waiters {
            visit.call(w)?;
        }
        for s in st.streams.values() {
            s.traverse(&visit)?;
        }
        if let Some(s) = &st.scope {
            s.traverse(&visit)?;
        }
        if let Some(c) = &st.spare {
            c.traverse(&visit)?;
        }
        st.watch.traverse(&visit)?;
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| {
            (st.io.take(), st.transport.take(), std::mem::take(&mut st.drain_waiters), std::mem::take(&mut st.streams), st.scope.take(), st.spare.take(), st.host.take(), std::mem::take(&mut st.watch))
        });
        drop(taken);
    }
}
