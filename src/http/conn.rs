//! `HttpConn`: one HTTP/1.1 connection, where the sans-I/O core (`h1`) meets the stream
//! transport and the application. The one place that joins them.
//!
//! The data path: the stream transport hands received bytes straight to `feed` (a
//! `NativeProtocol`: no Python call, no `bytes` for the head); `process` polls `h1` and, for
//! each request head, builds the request natively (`asgi::Request`) and starts the
//! application — an ASGI app's coroutine in a task whose first step runs at once, inside this
//! call, as 3.12's eager tasks do, so a response that needs no I/O is written before `process`
//! returns. Responses are appended to `out` and leave with one write: at the end of `process`,
//! or at the end of the loop iteration (`FlushAtEnd`) for responses finished by a task later.
//! Over TLS (stdlib `sslproto`) the same object is a plain asyncio protocol: `data_received`
//! feeds it and its writes go through the TLS transport.
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

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::asgi;
use super::body::Collected;
use super::native;
use super::cycle::{self, Cycle};
use super::request::{self, HeadCopy};
use super::h1::{After, Conn, Event, Phase, Stamp, CONTINUE};
use super::server::{Interface, ServerState};
use crate::eventloop::core::LoopCore;
use crate::eventloop::flush::FlushAtEnd;
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::sys::monotonic_ns;
use crate::transport::stream::{NativeProtocol, Received, StreamIO};

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
    next_cycle: u64,
    /// Inside `process`: a response that ends here lets the loop go on to the next request.
    in_process: bool,
    flush_queued: bool,
    continue_scheduled: bool,
    /// We paused the transport's reading (back-pressure of an unread body).
    read_paused: bool,
    /// The transport asked us to stop writing (its buffer is above the high-water mark).
    write_paused: bool,
    drain_waiters: Vec<Py<PyAny>>,
    pub(crate) lost: bool,
    /// Close once `out` is written.
    close_after: bool,
    /// When the current wait began (idle since, or the body's last progress), and when the
    /// current head began: what the timeouts measure.
    pub(crate) since: u64,
    head_since: u64,
    idle_phase: bool,
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

    /// Act on buffered input until a request waits for its application (see the module docs).
    fn run(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.st.borrow_mut(py)?.in_process = true;
        let r = Self::run_requests(slf);
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
                    let step = match st.h1.poll() {
                        Ok(Event::Head(head)) => {
                            if server.limit_concurrency.is_some_and(|l| server.in_flight.load(Ordering::Relaxed) >= l) {
                                Step::Fail(503, "limit-concurrency")
                            } else {
                                Step::Start(HeadCopy::from_head(py, &head, &server.root_path_bytes))
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
        Self::close_when_flushed(slf)
    }

    /// Start the application for the request whose head is `head`. `Ok(true)`: its response
    /// is already complete (go on with the next request).
    fn start(slf: &Bound<'_, Self>, head: HeadCopy) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let id = {
            let mut st = this.st.borrow_mut(py)?;
            st.next_cycle += 1;
            st.next_cycle
        };
        server.in_flight.fetch_add(1, Ordering::Relaxed);
        match server.interface {
            Interface::Asgi => {
                let (scope, cycle) = asgi::request(slf, &head, id)?;
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                let receive = Py::new(py, asgi::Receive { conn: slf.clone().unbind(), cycle: id })?;
                let send = Py::new(py, asgi::Send { conn: slf.clone().unbind(), cycle: id })?;
                match server.app.bind(py).call1((scope, receive, send.bind(py))) {
                    // The app's own coroutine is the task's (no wrapper frame): how it ended is
                    // read off the task (`asgi::watch`).
                    Ok(coro) => {
                        let task = Self::spawn(slf, &coro)?;
                        asgi::watch(send.bind(py), &task)?;
                    }
                    Err(e) => send.get().failed(py, e.value(py))?,
                }
            }
            Interface::Native => {
                let (request, mut cycle, _) = native::request(slf, &head, id, false)?;
                if head.has_body {
                    // The handler gets the whole body: read it first (`collect`).
                    cycle.pending = Some(request);
                    cycle.collected = Some(Collected::new(py, head.body_len)?);
                    this.st.borrow_mut(py)?.cycle = Some(cycle);
                    return Self::collect(slf, id);
                }
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                native::call(slf, id, request.bind(py))?;
            }
            Interface::NativeAsync | Interface::Wsgi => {
                let (request, cycle, send) = native::request(slf, &head, id, true)?;
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                let receive = request.get().receive_of(py);
                if server.interface == Interface::Wsgi {
                    let submit = server.wsgi_submit.as_ref().expect("a WSGI server has its bridge");
                    submit.bind(py).call1((server.app.bind(py), request, receive, send))?;
                } else {
                    let coro = server.runner.bind(py).call_method1(intern!(py, "run_async"), (server.app.bind(py), request, receive, send))?;
                    Self::spawn(slf, &coro)?;
                }
            }
        }
        Ok(this.st.borrow(py)?.cycle.is_none())
    }

    /// Run `coro` as a task whose first step runs now (see the module docs).
    pub(crate) fn spawn<'py>(slf: &Bound<'py, Self>, coro: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        static EAGER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let py = slf.py();
        let loop_ = slf.get().loop_(py);
        // A name given saves the task formatting its own ("Task-N", a printf per request).
        let kw = [(intern!(py, "loop"), loop_.clone()), (intern!(py, "name"), intern!(py, "ringloop.http").clone().into_any())];
        if *EAGER.get_or_init(|| py.version_info() >= (3, 12)) {
            // The task runs its first step in its constructor (3.12's eager start).
            let kw = kw.into_py_dict(py)?;
            kw.set_item(intern!(py, "eager_start"), true)?;
            return crate::py::asyncio_task(py)?.call((coro,), Some(&kw));
        }
        let task = crate::py::asyncio_task(py)?.call((coro,), Some(&kw.into_py_dict(py)?))?;
        LoopCore::run_task_step_now(loop_.cast::<LoopCore>()?, &task)?;
        Ok(task)
    }

    /// Read more of a synchronous native handler's body; call it once the body is whole.
    /// `Ok(true)`: its response is already complete (go on with the next request).
    fn collect(slf: &Bound<'_, Self>, id: u64) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let drained = cycle::drain_body(slf, id, |c, d| {
            if let Some(buf) = c.collected.as_mut() {
                buf.push(py, d);
            }
        })?;
        match drained {
            cycle::Drained::Wait | cycle::Drained::Read { done: false } => Ok(false),
            cycle::Drained::Disconnect => Ok(this.st.borrow(py)?.cycle.is_none()),
            cycle::Drained::Read { done: true } => {
                let ready = {
                    let mut st = this.st.borrow_mut(py)?;
                    let Some(c) = cycle::current(&mut st, id) else { return Ok(true) };
                    match (c.pending.take(), c.collected.take()) {
                        (Some(request), Some(body)) => Some((request, body)),
                        _ => None,
                    }
                };
                if let Some((request, body)) = ready {
                    request.get().set_body(py, body.finish(py))?;
                    native::call(slf, id, request.bind(py))?;
                }
                Ok(this.st.borrow(py)?.cycle.is_none())
            }
        }
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
            (st.h1.wants_read() && !st.lost, st.read_paused, st.transport.as_ref().map(|t| t.clone_ref(py)), wake)
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
        server.in_flight.fetch_sub(1, Ordering::Relaxed);
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

    /// Write `out` at the end of this loop iteration (responses finished by tasks).
    pub(crate) fn queue_flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.flush_queued || st.in_process || (st.out.is_empty() && !st.close_after) {
                return Ok(());
            }
            st.flush_queued = true;
        }
        LoopCore::queue_flush(slf.get().loop_(py).cast::<LoopCore>()?, slf.clone().unbind())
    }

    /// Write `out` now; then close if that was asked.
    pub(crate) fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (mut out, io, transport, close) = {
            let mut st = this.st.borrow_mut(py)?;
            st.flush_queued = false;
            if st.lost {
                st.out.clear();
                return Ok(());
            }
            (std::mem::take(&mut st.out), st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)), st.close_after)
        };
        if !out.is_empty() {
            match (&io, &transport) {
                (Some(io), _) => StreamIO::write_slice(io.bind(py), &out)?,
                (None, Some(t)) => {
                    t.call_method1(py, intern!(py, "write"), (PyBytes::new(py, &out),))?;
                }
                (None, None) => {}
            }
            out.clear();
        }
        {
            // Keep the vector's capacity for the next response.
            let mut st = this.st.borrow_mut(py)?;
            if st.out.is_empty() {
                st.out = out;
            }
        }
        if close {
            if let Some(t) = transport {
                t.call_method0(py, intern!(py, "close"))?;
            }
        }
        Ok(())
    }

    /// Write a body the application owns: framed by `h1`, sent from its own `bytes` after what
    /// `out` holds.
    pub(crate) fn write_large_body(slf: &Bound<'_, Self>, body: &Bound<'_, PyBytes>, after: &[u8]) -> PyResult<()> {
        let py = slf.py();
        Self::flush(slf)?;
        let (io, transport) = {
            let st = slf.get().st.borrow(py)?;
            (st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)))
        };
        match (io, transport) {
            (Some(io), _) => StreamIO::write_bytes(io.bind(py), body)?,
            (None, Some(t)) => {
                t.call_method1(py, intern!(py, "write"), (body,))?;
            }
            (None, None) => {}
        }
        slf.get().st.borrow_mut(py)?.out.extend_from_slice(after);
        Ok(())
    }

    /// Close once everything written so far is out (asyncio's `close` flushes first).
    pub(crate) fn close_when_flushed(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let in_process = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.close_after = true;
            st.in_process
        };
        if in_process {
            return Ok(()); // `run` flushes, and closes, when it returns
        }
        Self::queue_flush(slf)
    }

    /// Whether a `send` should wait for the transport's buffer to drain.
    pub(crate) fn write_blocked(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.write_paused)
    }

    /// A future resolved once the transport's buffer drained below its low-water mark.
    pub(crate) fn drained(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let fut = slf.get().loop_(py).call_method0(intern!(py, "create_future"))?.unbind();
        slf.get().st.borrow_mut(py)?.drain_waiters.push(fut.clone_ref(py));
        Ok(fut)
    }

    /// Close a connection whose phase outlived its timeout (`ServerState::sweep`).
    pub(crate) fn check_timeout(slf: &Bound<'_, Self>, now: u64) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let t = &this.server.get().timeouts;
        let verdict = {
            let st = this.st.borrow(py)?;
            if st.lost || st.close_after {
                None
            } else {
                match st.h1.phase() {
                    Phase::Idle if st.cycle.is_none() && t.keep_alive > 0 && now.saturating_sub(st.since) > t.keep_alive => Some(None),
                    Phase::Head if st.cycle.is_none() && t.head > 0 && now.saturating_sub(st.head_since) > t.head => Some(Some("head-timeout")),
                    Phase::Body
                        if t.body > 0 && st.cycle.as_ref().is_some_and(|c| c.receive_waiter.is_some()) && now.saturating_sub(st.since) > t.body =>
                    {
                        Some(Some("body-timeout"))
                    }
                    _ => None,
                }
            }
        };
        match verdict {
            None => Ok(()),
            Some(None) => {
                Self::close_when_flushed(slf)?;
                Self::flush(slf)
            }
            Some(Some(rule)) => {
                Self::reject(slf, 408, rule)?;
                Self::flush(slf)
            }
        }
    }

    /// Graceful shutdown: idle connections close now; busy ones after their response.
    pub(crate) fn begin_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let idle = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.h1.set_close();
            // A request that already reached us (in `h1`, or still in the socket) is served,
            // with `connection: close`, rather than dropped: its client could not tell a close
            // here from a lost request. A stalled one meets its head timeout or the abort at
            // the end of the graceful period.
            let fd = st.io.as_ref().map(|io| io.get().fd());
            let pending = st.h1.buffered() > 0 || fd.is_some_and(|fd| crate::reactor::sys::bytes_waiting(fd) > 0);
            st.cycle.is_none() && !pending
        };
        if idle {
            Self::close_when_flushed(slf)?;
            Self::flush(slf)?;
        }
        Ok(())
    }

    pub(crate) fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let t = slf.get().st.borrow(py)?.transport.as_ref().map(|t| t.clone_ref(py));
        if let Some(t) = t {
            t.call_method0(py, intern!(py, "abort"))?;
        }
        Ok(())
    }

    /// The stamp (`date`, `server`) for a response written now, given to `f` with the state.
    pub(crate) fn with_stamp<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ConnState, &Stamp<'_>) -> R) -> PyResult<R> {
        let server = self.server.get();
        server.with_date(py, |date| -> PyResult<R> {
            let mut st = self.st.borrow_mut(py)?;
            Ok(f(&mut st, &Stamp { date, server: server.server_header.as_deref() }))
        })?
    }

    /// `100 Continue` before the first body read, if the client waits for it.
    pub(crate) fn push_continue(st: &mut ConnState) {
        st.out.extend_from_slice(CONTINUE);
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
}

impl NativeProtocol for HttpConn {
    fn feed(slf: &Bound<'_, Self>, data: Received<'_>) -> PyResult<()> {
        let mut st = slf.get().st.borrow_mut(slf.py())?;
        let st = &mut *st;
        match data {
            Received::Slice(b) => st.h1.feed(b),
            Received::Ring(r) => r.drain_chunks(|c| st.h1.feed(c)),
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
                next_cycle: 0,
                in_process: false,
                flush_queued: false,
                continue_scheduled: false,
                read_paused: false,
                write_paused: false,
                drain_waiters: Vec::new(),
                lost: false,
                close_after: false,
                since: now,
                head_since: now,
                idle_phase: true,
            }),
        })
    }

    fn connection_made(slf: &Bound<'_, Self>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let io = transport.getattr(intern!(py, "_io")).ok().and_then(|io| io.cast_into::<StreamIO>().ok());
        let client = request::address(&transport.call_method1(intern!(py, "get_extra_info"), ("peername",))?)?;
        let local = request::address(&transport.call_method1(intern!(py, "get_extra_info"), ("sockname",))?)?;
        let peer_trusted = match &server.proxy_trusted {
            Some(trusted) => trusted.call1(py, (&client,))?.is_truthy(py)?,
            None => false,
        };
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
        let id = server.register(py, slf.clone().unbind())?;
        this.id.store(id, Ordering::Relaxed);
        if server.shutting_down.load(Ordering::Relaxed) {
            Self::begin_shutdown(slf)?;
        }
        Ok(())
    }

    /// TLS (and any transport without native reads): bytes arrive here.
    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = data.cast::<PyBytes>()?;
        <Self as NativeProtocol>::feed(slf, Received::Slice(bytes.as_bytes()))?;
        Self::run(slf)
    }

    /// The peer shut its side: the request in progress still gets its response; an idle
    /// connection closes.
    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let py = slf.py();
        slf.get().st.borrow_mut(py)?.h1.feed_eof();
        Self::run(slf)?;
        let busy = slf.get().st.borrow(py)?.cycle.is_some();
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
            cycle::resolve(w.bind(py), py.None().bind(py))?;
        }
        cycle::answer_receiver(slf)?;
        let id = this.id.swap(u64::MAX, Ordering::Relaxed);
        if id != u64::MAX {
            this.server.get().unregister(py, id)?;
        }
        let cycle = this.st.borrow_mut(py)?.cycle.take();
        if let Some(c) = cycle {
            this.server.get().in_flight.fetch_sub(1, Ordering::Relaxed);
            cycle::cycle_over(py, c)?;
        }
        Ok(())
    }

    fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.st.borrow_mut(py)?.write_paused = true;
        Ok(())
    }

    fn resume_writing(&self, py: Python<'_>) -> PyResult<()> {
        let waiters = {
            let mut st = self.st.borrow_mut(py)?;
            st.write_paused = false;
            std::mem::take(&mut st.drain_waiters)
        };
        for w in waiters {
            cycle::resolve(w.bind(py), py.None().bind(py))?;
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
        for w in &st.drain_waiters {
            visit.call(w)?;
        }
        if let Some(c) = &st.cycle {
            c.traverse(&visit)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.st.try_borrow_mut_unattached().map(|mut st| {
            (st.io.take(), st.transport.take(), std::mem::take(&mut st.drain_waiters), st.cycle.take())
        });
        drop(taken);
    }
}
