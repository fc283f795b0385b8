//! `HttpConn`: one HTTP/1.1 connection, where the sans-I/O core (`h1`) meets the stream
//! transport and the application. The one place that joins them.
//!
//! The data path: the stream transport hands received bytes straight to `feed` (a
//! `NativeProtocol`: no Python call, no `bytes` for the head); `process` polls `h1` and, for
//! each request head, starts the application through the interface's `Dispatch`
//! (`start.rs`) — an ASGI app's coroutine in the connection's host task (`host.rs`), its first
//! step taken at once, inside this call, so a response that needs no I/O is written before
//! `process` returns. Responses are appended to `out` and leave with one write: at the end of
//! `process`, or at the end of the loop iteration (`FlushAtEnd`) for responses finished by a
//! task later.
//!
//! TLS is below this object, in the stream transport (rustls: `transport::stream::tls` drives
//! the sans-I/O `crate::tls::Session`): the transport decrypts before it calls `feed` and
//! encrypts what `flush` writes, so the connection sees plaintext only, on the same native path
//! as cleartext; what it knows of the session (the ASGI `tls` extension, `ConnScope::with_tls`)
//! it reads from the transport. `data_received` is the path of a transport without native reads
//! (an asyncio transport that is not ringloop's), whose writes go through `transport.write`.
//!
//! A WebSocket upgrade runs its session over this connection as its `websocket::Channel`
//! (`channel.rs`): the session names no driver, the driver feeds it, sweeps and shuts it down.
//!
//! Invariants:
//! - at most one request cycle at a time: `h1` surfaces the next (pipelined) head only after
//!   the current response ended, so responses leave in request order;
//! - the next request is processed only outside any task's step: from `process` (a loop
//!   callback), or from `_continue`, which a response ended inside a task schedules;
//! - no `GilCell` borrow is held while Python code runs or a container object is allocated
//!   (which may run the cycle collector and finalizers): request fields are copied into
//!   `bytes`/`str` under the borrow (untracked objects), tuples and dicts built after it;
//! - the request body is read from `h1` only when the application asks (`receive`): unread
//!   body stays in `h1`'s buffer, and reading the socket pauses when it is full.

mod channel;
pub(crate) mod cycle;
mod files;
mod lifecycle;
mod output;
mod registry;
mod sink;
mod start;
pub(crate) mod watch;

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};

use self::cycle::Cycle;
use super::h2conn::{H2Conn, PREFACE};
use super::host::Host;
use super::request::{self, HeadCopy};
use super::scope::ConnScope;
use super::proto::h1::{After, Conn, Event, Phase, Stamp};
use super::server::{HttpMode, ServerState};
use super::stream::message::resolve;
use super::stream::Spare;
use crate::http::stream::records::Records;
use super::websocket::{self, Session, WsState};
use self::sink::SINK;
use crate::eventloop::core::LoopCore;
use crate::eventloop::flush::FlushAtEnd;
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::sys::monotonic_ns;
use crate::transport::stream::{NativeProtocol, NativeTransport, Received, StreamIO};

pub(crate) struct ConnState {
    pub(crate) h1: Conn,
    /// Response bytes not written yet.
    pub(crate) out: Vec<u8>,
    /// The native stream transport's I/O (plain TCP and Unix sockets).
    io: Option<Py<StreamIO>>,
    /// The asyncio transport (closing, pausing; the writes of a TLS connection).
    transport: Option<Py<PyAny>>,
    /// `scope["client"]` / `["server"]`: `(host, port)` or `None`.
    pub(crate) client: Py<PyAny>,
    pub(crate) local: Py<PyAny>,
    /// The peer is a trusted proxy (`--proxy-headers`): its forwarding headers are believed.
    pub(crate) peer_trusted: bool,
    pub(crate) cycle: Option<Cycle>,
    /// What this connection's ASGI scopes are copied from (`scope`), made at its first request.
    pub(crate) scope: Option<ConnScope>,
    /// What the interface kept for the next request (ASGI: the latest `receive` and `send`).
    pub(crate) spare: Option<Spare>,
    next_cycle: u64,
    /// Inside `process`: a response that ends here lets the loop go on to the next request.
    in_process: bool,
    flush_queued: bool,
    continue_scheduled: bool,
    /// We paused the transport's reading (back-pressure of an unread body).
    read_paused: bool,
    /// The transport asked us to stop writing (its buffer is above the high-water mark).
    pub(crate) write_paused: bool,
    drain_waiters: Vec<Py<PyAny>>,
    /// The connection's host task's coroutine (`host.rs`), made with its first request.
    pub(crate) host: Option<Py<Host>>,
    /// The requests the watch may need, kept while the server tracks them (`watch.rs`).
    pub(crate) watch: Records,
    pub(crate) lost: bool,
    /// The WebSocket session of an upgrade request, from its head until the session ends.
    pub(crate) ws: Option<Box<WsState>>,
    /// Close once `out` is written.
    pub(crate) close_after: bool,
    /// ... after half-closing and reading what the client still sends (`linger`): an error
    /// answer then reaches a client that is still sending, where a close with unread bytes
    /// would reset the connection and could destroy the answer in flight.
    linger_after: bool,
    /// Half-closed after an error answer: reads are discarded until EOF or `LINGER_NS`.
    pub(crate) lingering: bool,
    /// A static file's body is still being sent by `send_rest` (the connection is busy, as
    /// with a `cycle`), and its access-log line.
    static_sending: bool,
    static_log: Option<Box<(files::LogLine, u16, u64)>>,
    /// When the current wait began (idle since, or the body's last progress), and when the
    /// current head began: what the timeouts measure.
    pub(crate) since: u64,
    head_since: u64,
    idle_phase: bool,
    /// The first bytes, held until the protocol is chosen (`choose`); `None` once it is, or
    /// from the start with `--http 1`.
    sniff: Option<Vec<u8>>,
    /// The HTTP/2 driver the connection was handed to (`choose`): the transport reads into it,
    /// and the calls that still come here are passed on.
    pub(crate) h2: Option<Py<H2Conn>>,
}

impl ConnState {
    /// The native transport, if any (TLS session details are read from it).
    pub(crate) fn io(&self) -> Option<&Py<StreamIO>> {
        self.io.as_ref()
    }
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct HttpConn {
    pub(crate) server: Py<ServerState>,
    id: AtomicU64,
    pub(crate) st: GilCell<ConnState>,
}

/// What `process` does next, decided under the borrow.
enum Step {
    Start(HeadCopy),
    /// A static file (`files.rs`), answered without the application.
    Static(Box<files::StaticStep>),
    /// A synchronous native handler's request is waiting for more of its body.
    Collect(u64),
    Stop,
    Fail(u16, &'static str),
    Close,
}

impl HttpConn {
    fn loop_<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.server.get().loop_.bind(py)
    }

    /// Pick the connection's protocol from its first bytes: HTTP/2 if the TLS session agreed
    /// on ALPN `h2`, if the bytes open with the client preface (h2c with prior knowledge), or
    /// if the server speaks only HTTP/2; else HTTP/1.1. `eof`: no more bytes will come (a
    /// partial preface is then HTTP/1.1's to refuse). `true`: the connection is the HTTP/2
    /// driver's now, or waits for more bytes to tell.
    ///
    /// Here rather than where the connection is accepted: a TLS session's ALPN is known only
    /// once its handshake ended, which is after `connection_made`; and `feed` may not run the
    /// Python code making the driver needs. HTTP/1.1 pays nothing for it: its first bytes
    /// are told apart in `sniff` already.
    fn choose(slf: &Bound<'_, Self>, eof: bool) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let h2 = {
            let st = this.st.borrow(py)?;
            let Some(sniff) = st.sniff.as_deref() else { return Ok(false) };
            let alpn = |p: &[u8]| -> PyResult<bool> { Ok(match st.io.as_ref() { Some(io) => io.get().alpn_is(py, p)?, None => false }) };
            if server.http == HttpMode::H2 || alpn(b"h2")? {
                true
            } else if alpn(b"http/1.1")? {
                false
            } else if sniff.len() < PREFACE.len() && PREFACE.starts_with(sniff) && !eof {
                return Ok(true); // too few bytes to tell yet
            } else {
                sniff.starts_with(PREFACE)
            }
        };
        let sniff = this.st.borrow_mut(py)?.sniff.take().unwrap_or_default();
        if !h2 {
            this.st.borrow_mut(py)?.h1.feed(&sniff);
            return Ok(false);
        }
        let (io, transport, client, local, trusted) = {
            let st = this.st.borrow(py)?;
            (st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)), st.client.clone_ref(py), st.local.clone_ref(py), st.peer_trusted)
        };
        let conn = H2Conn::new(py, this.server.clone_ref(py), io, transport, client, local, trusted)?;
        this.st.borrow_mut(py)?.h2 = Some(conn.clone_ref(py));
        conn.get().feed_bytes(py, &sniff)?;
        if server.shutting_down.load(Ordering::Relaxed) {
            H2Conn::begin_shutdown(conn.bind(py))?;
        }
        H2Conn::run(conn.bind(py))?;
        Ok(true)
    }

    /// The connection's first bytes, before its protocol is chosen. Bytes that cannot open
    /// the client preface are HTTP/1.1's at once, with no copy (an HTTP/2 client sends the
    /// preface first over TLS too, RFC 9113 §3.4, so ALPN cannot make them HTTP/2); bytes that
    /// may are held for `choose` (in `process`, where the TLS session's ALPN may be asked).
    fn sniff(st: &mut ConnState, c: &[u8], h2_only: bool) {
        let Some(held) = st.sniff.as_mut() else { return st.h1.feed(c) };
        let n = c.len().min(PREFACE.len());
        if held.is_empty() && !h2_only && c[..n] != PREFACE[..n] {
            st.sniff = None;
            st.h1.feed(c);
        } else {
            held.extend_from_slice(c);
        }
    }

    /// The HTTP/2 driver, if the connection was handed to it.
    pub(crate) fn h2(&self, py: Python<'_>) -> PyResult<Option<Py<H2Conn>>> {
        Ok(self.st.borrow(py)?.h2.as_ref().map(|h| h.clone_ref(py)))
    }

    /// Act on buffered input until a request waits for its application (see the module docs).
    fn run(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if this.st.borrow(py)?.lingering {
            return Ok(());
        }
        if this.st.borrow(py)?.sniff.is_some() && Self::choose(slf, false)? {
            return Ok(());
        }
        this.st.borrow_mut(py)?.in_process = true;
        let session = websocket::open(&mut this.st.borrow_mut(py)?.ws).map(|w| w.stream);
        let r = match session {
            Some(id) => websocket::process(Session::new(slf.as_any(), id, &SINK)),
            None => Self::run_requests(slf),
        };
        this.st.borrow_mut(py)?.in_process = false;
        Self::flush(slf)?;
        r
    }

    fn run_requests(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        loop {
            let step = {
                let mut st = this.st.borrow_mut(py)?;
                if let Some(c) = st.cycle.as_ref().filter(|c| c.pending.is_some() && !st.lost) {
                    Step::Collect(c.id)
                } else if st.cycle.is_some() || st.lost {
                    // A request is in its application: the body goes to it through `receive`.
                    Self::wake_receiver(&mut st);
                    Step::Stop
                } else {
                    let parts = &mut *st;
                    let step = match parts.h1.poll() {
                        Ok(Event::Head(head)) => {
                            if let Some(s) = files::static_answer(server, &head) {
                                Step::Static(s)
                            } else if server.limit_concurrency.is_some_and(|l| server.in_flight.load(Ordering::Relaxed) >= l) {
                                Step::Fail(503, "limit-concurrency")
                            } else {
                                Step::Start(HeadCopy::from_head(py, &head, &server.root_path_bytes, parts.scope.as_ref()))
                            }
                        }
                        Ok(Event::NeedData) | Ok(Event::Paused) => Step::Stop,
                        Ok(Event::Closed) | Ok(Event::Upgraded) => Step::Close,
                        Ok(Event::Data(_)) | Ok(Event::End) | Ok(Event::Continue) => Step::Stop,
                        Err(e) => Step::Fail(e.status(), e.rule()),
                    };
                    let now = monotonic_ns();
                    let idle = st.h1.phase() == Phase::Idle;
                    if idle && !st.idle_phase {
                        st.since = now;
                    } else if !idle && st.idle_phase {
                        st.head_since = now;
                    }
                    st.idle_phase = idle;
                    step
                }
            };
            match step {
                Step::Stop => break,
                Step::Close => {
                    Self::close_when_flushed(slf)?;
                    break;
                }
                Step::Fail(status, rule) => {
                    Self::reject(slf, status, rule)?;
                    break;
                }
                Step::Start(head) => {
                    if !Self::start(slf, head)? {
                        break;
                    }
                }
                Step::Static(s) => {
                    if !Self::serve_static(slf, *s)? {
                        break;
                    }
                }
                Step::Collect(id) => {
                    if !Self::collect(slf, id)? {
                        break;
                    }
                }
            }
        }
        Self::update_reading(slf)
    }

    /// A request the protocol refuses: its status (if no response byte was written yet), the
    /// rule logged at debug level, and the connection closed.
    fn reject(slf: &Bound<'_, Self>, status: u16, rule: &'static str) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        server.with_date(py, |date| -> PyResult<()> {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            let stamp = Stamp { date, server: server.server_header.as_deref() };
            st.h1.write_error(&mut st.out, status, &stamp);
            Ok(())
        })??;
        if let Some(debug) = &server.log_debug {
            let client = this.st.borrow(py)?.client.clone_ref(py);
            debug.call1(py, (format!("request rejected with {status}: {rule}"), client))?;
        }
        if status == 408 {
            // Too slow: nothing worth reading is coming (a slowloris sends a byte a second).
            return Self::close_when_flushed(slf);
        }
        Self::linger_when_flushed(slf)
    }

    /// A receive waits for body bytes that arrived: answer it now.
    fn wake_receiver(st: &mut ConnState) {
        if let Some(c) = st.cycle.as_mut() {
            c.wake = c.receive_waiter.is_some();
        }
    }

    /// Pause the transport's reading while `h1` holds as much unread body as it may, resume
    /// when the application consumed it.
    pub(crate) fn update_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (want, paused, transport, wake) = {
            let mut st = this.st.borrow_mut(py)?;
            let wake = st.cycle.as_mut().is_some_and(|c| std::mem::take(&mut c.wake));
            let paused = st.write_paused;
            let want = match websocket::wants_read(&mut st.ws, paused) {
                Some(w) => w && !st.lost,
                None => st.lingering || (st.h1.wants_read() && !st.lost),
            };
            (want, st.read_paused, st.transport.as_ref().map(|t| t.clone_ref(py)), wake)
        };
        if wake {
            cycle::answer_receiver(slf)?;
        }
        let Some(t) = transport else { return Ok(()) };
        if !want && !paused {
            this.st.borrow_mut(py)?.read_paused = true;
            t.call_method0(py, intern!(py, "pause_reading"))?;
        } else if want && paused {
            this.st.borrow_mut(py)?.read_paused = false;
            t.call_method0(py, intern!(py, "resume_reading"))?;
        }
        Ok(())
    }

    /// The response of cycle `id` ended with `after`: count it, log it, and go on.
    pub(crate) fn response_ended(slf: &Bound<'_, Self>, after: After) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let (cycle, in_process) = {
            let mut st = this.st.borrow_mut(py)?;
            st.since = monotonic_ns();
            (st.cycle.take(), st.in_process)
        };
        if let (Some(log), Some(c)) = (&server.access_log, &cycle) {
            let client = this.st.borrow(py)?.client.clone_ref(py);
            let seconds = monotonic_ns().saturating_sub(c.begun) as f64 / 1e9;
            log.call1(py, (client, &c.method, &c.path, &c.query, &c.version, c.status, c.sent, seconds))?;
        }
        if let Some(c) = cycle {
            cycle::cycle_over(py, c)?;
        }
        if server.count_request() {
            this.st.borrow_mut(py)?.h1.set_close();
            if let Some(cb) = &server.on_max_requests {
                cb.call0(py)?;
            }
        }
        match after {
            After::KeepAlive if server.shutting_down.load(Ordering::Relaxed) => Self::close_when_flushed(slf)?,
            After::KeepAlive if !in_process => Self::schedule_continue(slf)?,
            After::KeepAlive => {}
            After::Close | After::Upgrade => Self::close_when_flushed(slf)?,
        }
        if !in_process {
            Self::queue_flush(slf)?;
        }
        Ok(())
    }

    /// Process what is buffered once the current task step is over (see the module docs).
    fn schedule_continue(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.continue_scheduled {
                return Ok(());
            }
            st.continue_scheduled = true;
        }
        let cb = slf.getattr(intern!(py, "_continue"))?;
        let loop_ = slf.get().loop_(py).cast::<LoopCore>()?;
        LoopCore::call_soon_impl(loop_, &cb, crate::eventloop::handle::Args::None, None).map(|_| ())
    }

    /// The asyncio transport, or `None` once the connection is gone.
    pub(crate) fn transport(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let st = self.st.borrow(py)?;
        Ok(match (&st.transport, st.lost) {
            (Some(t), false) => t.clone_ref(py),
            _ => py.None(),
        })
    }

    pub(crate) fn is_lost(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.lost)
    }

    /// The connection's WebSocket session (in its handshake or open), as the session sees its
    /// channel (`channel.rs`).
    pub(crate) fn session<'a, 'py>(slf: &'a Bound<'py, Self>) -> PyResult<Option<Session<'a, 'py>>> {
        let id = slf.get().st.borrow(slf.py())?.ws.as_deref().map(|w| w.stream);
        Ok(id.map(|id| Session::new(slf.as_any(), id, &SINK)))
    }
}

impl NativeProtocol for HttpConn {
    fn feed(slf: &Bound<'_, Self>, data: Received<'_>) -> PyResult<()> {
        let mut st = slf.get().st.borrow_mut(slf.py())?;
        let st = &mut *st;
        if st.sniff.is_some() {
            let h2_only = slf.get().server.get().http == HttpMode::H2;
            match data {
                Received::Slice(b) => Self::sniff(st, b, h2_only),
                Received::Ring(r) => r.drain_chunks(|c| Self::sniff(st, c, h2_only)),
            }
            st.since = monotonic_ns();
            return Ok(());
        }
        if st.lingering {
            // After an error answer: what the client still sends is read and dropped.
            if let Received::Ring(r) = data {
                r.drain_chunks(|_| {});
            }
            return Ok(());
        }
        match data {
            Received::Slice(b) => {
                if !websocket::feed(&mut st.ws, b) {
                    st.h1.feed(b)
                }
            }
            Received::Ring(r) => r.drain_chunks(|c| {
                if !websocket::feed(&mut st.ws, c) {
                    st.h1.feed(c)
                }
            }),
        }
        st.since = monotonic_ns();
        Ok(())
    }

    fn process(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run(slf)
    }
}

impl FlushAtEnd for HttpConn {
    fn flush_at_end(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::flush(slf)
    }
}

#[pymethods]
impl HttpConn {
    #[new]
    fn py_new(py: Python<'_>, server: Py<ServerState>) -> PyResult<Self> {
        let limits = server.get().limits.clone();
        let sniff = (server.get().http != HttpMode::H1).then(Vec::new);
        let now = monotonic_ns();
        Ok(HttpConn {
            server,
            id: AtomicU64::new(u64::MAX),
            st: GilCell::new(ConnState {
                h1: Conn::new(limits),
                out: Vec::new(),
                io: None,
                transport: None,
                client: py.None(),
                local: py.None(),
                peer_trusted: false,
                cycle: None,
                scope: None,
                spare: None,
                next_cycle: 0,
                in_process: false,
                flush_queued: false,
                continue_scheduled: false,
                read_paused: false,
                write_paused: false,
                drain_waiters: Vec::new(),
                host: None,
                watch: Records::default(),
                lost: false,
                ws: None,
                close_after: false,
                linger_after: false,
                lingering: false,
                static_sending: false,
                static_log: None,
                since: now,
                head_since: now,
                idle_phase: true,
                sniff,
                h2: None,
            }),
        })
    }

    fn connection_made(slf: &Bound<'_, Self>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let io = transport.getattr(intern!(py, "_io")).ok().and_then(|io| io.cast_into::<StreamIO>().ok());
        let (peer, sock) = match transport.cast::<NativeTransport>() {
            Ok(t) => t.get().names(py)?,
            Err(_) => (
                transport.call_method1(intern!(py, "get_extra_info"), ("peername",))?.unbind(),
                transport.call_method1(intern!(py, "get_extra_info"), ("sockname",))?.unbind(),
            ),
        };
        let client = request::address(peer.bind(py))?;
        let local = request::address(sock.bind(py))?;
        let peer_trusted = server.peer_trusted(client.bind(py))?;
        if let Some(io) = &io {
            io.get().set_native_protocol(py, slf.clone().unbind())?;
        }
        {
            let mut st = this.st.borrow_mut(py)?;
            st.io = io.map(Bound::unbind);
            st.transport = Some(transport.clone().unbind());
            st.client = client;
            st.local = local;
            st.peer_trusted = peer_trusted;
        }
        let id = server.register(py, slf.clone().into_any().unbind())?;
        this.id.store(id, Ordering::Relaxed);
        if server.shutting_down.load(Ordering::Relaxed) {
            Self::begin_shutdown(slf)?;
        }
        Ok(())
    }

    /// A transport without native reads (see the module docs): bytes arrive here.
    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = data.cast::<PyBytes>()?;
        if let Some(h2) = slf.get().h2(slf.py())? {
            h2.get().feed_bytes(slf.py(), bytes.as_bytes())?;
            return H2Conn::run(h2.bind(slf.py()));
        }
        <Self as NativeProtocol>::feed(slf, Received::Slice(bytes.as_bytes()))?;
        Self::run(slf)
    }

    /// The peer shut its side: the request in progress still gets its response; an idle
    /// connection closes.
    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let py = slf.py();
        if let Some(h2) = slf.get().h2(py)? {
            return H2Conn::eof_received(h2.bind(py));
        }
        if slf.get().st.borrow(py)?.sniff.is_some() && Self::choose(slf, true)? {
            if let Some(h2) = slf.get().h2(py)? {
                return H2Conn::eof_received(h2.bind(py));
            }
        }
        if slf.get().st.borrow(py)?.lingering {
            return Ok(false); // the client read our answer and is done: the transport closes
        }
        let session = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.ws.as_deref_mut().map(|w| w.conn().map(|c| c.feed_eof())).is_some()
        };
        if session {
            // A WebSocket client that shuts its side is gone (RFC 6455 has no half-close): what
            // it sent is read, then the transport closes and a `receive` learns of it.
            Self::run(slf)?;
            return Ok(false);
        }
        slf.get().st.borrow_mut(py)?.h1.feed_eof();
        Self::run(slf)?;
        let (busy, sending) = {
            let st = slf.get().st.borrow(py)?;
            (st.cycle.is_some(), st.static_sending)
        };
        if sending {
            return Ok(true); // the static body goes on; the EOF is seen after it (`h1`)
        }
        if busy {
            cycle::answer_receiver(slf)?;
        } else {
            Self::close_when_flushed(slf)?;
        }
        Ok(busy)
    }

    fn connection_lost(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let waiters = {
            let mut st = this.st.borrow_mut(py)?;
            st.lost = true;
            st.out.clear();
            st.io = None;
            std::mem::take(&mut st.drain_waiters)
        };
        for w in waiters {
            resolve(w.bind(py), py.None().bind(py))?;
        }
        cycle::answer_receiver(slf)?;
        let id = this.id.swap(u64::MAX, Ordering::Relaxed);
        if id != u64::MAX {
            this.server.get().unregister(py, id)?;
        }
        // Taken: the driver refers to the transport, which refers to us.
        let h2 = this.st.borrow_mut(py)?.h2.take();
        if let Some(h2) = h2 {
            return H2Conn::connection_lost(h2.bind(py));
        }
        let cycle = this.st.borrow_mut(py)?.cycle.take();
        if let Some(c) = cycle {
            cycle::cycle_over(py, c)?;
        }
        // The spare pair refers to the connection: dropped with it, not left to the collector.
        let (host, spare) = {
            let mut st = this.st.borrow_mut(py)?;
            (st.host.take(), st.spare.take())
        };
        drop(spare);
        if let Some(h) = host {
            h.get().connection_closed(py)?;
        }
        match Self::session(slf)? {
            Some(s) => websocket::native::connection_lost(s),
            None => Ok(()),
        }
    }

    fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(h2) = self.h2(py)? {
            return h2.get().pause_writing(py);
        }
        self.st.borrow_mut(py)?.write_paused = true;
        Ok(())
    }

    fn resume_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if let Some(h2) = this.h2(py)? {
            return H2Conn::resume_writing(h2.bind(py));
        }
        let (waiters, session) = {
            let mut st = this.st.borrow_mut(py)?;
            st.write_paused = false;
            (std::mem::take(&mut st.drain_waiters), websocket::open(&mut st.ws).map(|w| w.stream))
        };
        for w in waiters {
            resolve(w.bind(py), py.None().bind(py))?;
        }
        if let Some(id) = session {
            // A WebSocket session stops reading (and a native one delivering) while the
            // transport's buffer is full: both go on now.
            websocket::process(Session::new(slf.as_any(), id, &SINK))?;
        }
        Ok(())
    }

    /// Go on with buffered requests after a response a task finished (see the module docs).
    fn _continue(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.get().st.borrow_mut(slf.py())?.continue_scheduled = false;
        Self::run(slf)
    }

    /// `(host, port)` of the peer, or `None` (for access logs).
    #[getter]
    fn client(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.st.borrow(py)?.client.clone_ref(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.server)?;
        let Some(st) = self.st.try_borrow_unattached() else { return Ok(()) };
        visit.call(&st.io)?;
        visit.call(&st.transport)?;
        visit.call(&st.client)?;
        visit.call(&st.local)?;
        visit.call(&st.host)?;
        visit.call(&st.h2)?;
        if let Some(w) = st.ws.as_deref() {
            visit.call(&w.native)?;
        }
        for w in &st.drain_waiters {
            visit.call(w)?;
        }
        if let Some(c) = &st.cycle {
            c.traverse(&visit)?;
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
            (st.io.take(), st.transport.take(), std::mem::take(&mut st.drain_waiters), st.cycle.take(), st.ws.take(), std::mem::take(&mut st.watch), st.scope.take(), st.spare.take(), st.h2.take())
        });
        drop(taken);
    }
}
