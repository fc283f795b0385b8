//! `ServerState`: what every connection of one worker's HTTP server shares — the application
//! and how it is called, the protocol limits, the configured headers and timeouts, the cached
//! `date`, the count of requests, and the connections themselves (for timeouts and graceful
//! shutdown). Made by `ringloop.server` (Python) from its `Config`; read by `conn` on every
//! request, so everything on that path is plain Rust data or a cached Python object.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{PyTraverseError, PyVisit};

use super::proto::h1::{DateCache, Limits};
use super::request::{forwarded, HeadCopy};
use super::scope::{ConnScope, Origin};
use crate::eventloop::gil_cell::GilCell;
use crate::reactor::sys::monotonic_ns;

/// How the application is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// ASGI 3: `await app(scope, receive, send)` in a task whose first step runs at once.
    Asgi,
    /// The native handler API: `handler(request) -> Response`, a plain call.
    Native,
    /// `async def handler(request) -> Response`, in a task like ASGI.
    NativeAsync,
    /// WSGI: `app(environ, start_response)` in the bridge's thread pool.
    Wsgi,
}

impl Interface {
    fn parse(name: &str) -> PyResult<Interface> {
        Ok(match name {
            "asgi" => Interface::Asgi,
            "native" => Interface::Native,
            "native-async" => Interface::NativeAsync,
            "wsgi" => Interface::Wsgi,
            _ => return Err(PyValueError::new_err(format!("unknown interface {name:?}: expected asgi, native, native-async or wsgi"))),
        })
    }
}

/// Timeouts in ns (0: none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeouts {
    /// An idle keep-alive connection (and a new one's wait for its first byte).
    pub keep_alive: u64,
    /// A request head that is still incomplete (slowloris).
    pub head: u64,
    /// A request body that stalls while the application waits for it.
    pub body: u64,
    /// An HTTP/2 response whose `send()` waits on a closed flow-control window (the client
    /// gives no credit: CVE-2019-9517's slow reader) this long without a byte taken: the stream
    /// is reset (`--http2-send-timeout`).
    pub h2_send: u64,
    /// HTTP/2 keep-alive PINGs (`--http2-keep-alive-interval`, as hyper's and granian's): a
    /// PING after this long without a byte from the client (0: never), ...
    pub h2_ping_interval: u64,
    /// ... and the connection ends (GOAWAY, close) when its ACK has not come this long after.
    pub h2_ping_timeout: u64,
}

/// Which protocols a connection may speak (`--http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMode {
    /// HTTP/2 for a client that asks (ALPN `h2`, or the h2c preface), else HTTP/1.1.
    Auto,
    /// HTTP/1.1 only: the preface is an HTTP/1.1 request line like any other (answered 400).
    H1,
    /// HTTP/2 only, whatever the client sends first.
    H2,
}

impl HttpMode {
    fn parse(name: &str) -> PyResult<HttpMode> {
        Ok(match name {
            "auto" => HttpMode::Auto,
            "1" => HttpMode::H1,
            "2" => HttpMode::H2,
            _ => return Err(PyValueError::new_err(format!("--http: {name:?} is not one of auto, 1, 2"))),
        })
    }
}

/// The HTTP/2 settings from `--http2-*`, each checked against the range RFC 9113 allows (a
/// value outside it is one `ValueError` naming the flag, not h2's clamp or panic).
#[allow(clippy::too_many_arguments)]
fn h2_settings(
    max_concurrent_streams: u32,
    initial_stream_window: u32,
    initial_connection_window: u32,
    max_headers_size: u32,
    max_frame_size: u32,
    max_reset_streams: usize,
    max_empty_frames: usize,
) -> PyResult<super::proto::h2::Settings> {
    const MAX_WINDOW: u32 = (1 << 31) - 1;
    let bad = |flag: &str, v: u32, range: &str| PyValueError::new_err(format!("--{flag}: {v} is out of range ({range})"));
    if max_concurrent_streams == 0 {
        return Err(bad("http2-max-concurrent-streams", max_concurrent_streams, "at least 1"));
    }
    if !(1..=MAX_WINDOW).contains(&initial_stream_window) {
        return Err(bad("http2-initial-stream-window-size", initial_stream_window, "1 to 2147483647"));
    }
    // Below 64 KiB the connection window is the protocol's default already (RFC 9113 §6.9.2:
    // it can only be raised by WINDOW_UPDATE).
    if !(65_535..=MAX_WINDOW).contains(&initial_connection_window) {
        return Err(bad("http2-initial-connection-window-size", initial_connection_window, "65535 to 2147483647"));
    }
    if max_headers_size == 0 {
        return Err(bad("http2-max-headers-size", max_headers_size, "at least 1"));
    }
    if !(16_384..=16_777_215).contains(&max_frame_size) {
        return Err(bad("http2-max-frame-size", max_frame_size, "16384 to 16777215"));
    }
    if max_reset_streams == 0 {
        return Err(bad("http2-max-reset-streams", max_reset_streams as u32, "at least 1"));
    }
    Ok(super::proto::h2::Settings {
        max_concurrent_streams,
        initial_stream_window,
        initial_connection_window,
        max_header_list_size: max_headers_size,
        max_frame_size,
        max_early_resets: max_reset_streams,
        max_empty_frames,
        // RFC 8441 (WebSocket over a stream): announced once the WebSocket settings are
        // known (`ServerState::new`), only where the server serves WebSocket.
        enable_connect_protocol: false,
        ..super::proto::h2::Settings::default()
    })
}

/// The most `--http2-keep-alive-interval` may be (ms): a day.
const MAX_PING_INTERVAL_MS: u64 = 86_400_000;

/// `--http2-keep-alive-interval` (milliseconds, as granian's; 0: off) in ns.
fn h2_ping_interval(ms: u64) -> PyResult<u64> {
    if ms > MAX_PING_INTERVAL_MS {
        return Err(PyValueError::new_err(format!("--http2-keep-alive-interval: {ms} is out of range (0 to {MAX_PING_INTERVAL_MS} ms)")));
    }
    Ok(ms * 1_000_000)
}

/// `--http2-keep-alive-timeout` (seconds, as granian's) in ns: more than zero, or a PING
/// could never be answered in time.
fn h2_ping_timeout(seconds: f64) -> PyResult<u64> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(PyValueError::new_err(format!("--http2-keep-alive-timeout: must be > 0 seconds, got {seconds}")));
    }
    Ok((seconds * 1e9) as u64)
}

/// WebSocket settings (`--ws*`); `None` in `ServerState`: upgrade requests are plain HTTP.
#[derive(Debug, Clone)]
pub struct WsSettings {
    pub config: super::proto::ws::Config,
    /// What permessage-deflate we agree to (`None`: not offered, `--ws-per-message-deflate`).
    pub deflate: Option<super::proto::ws::DeflateConfig>,
    /// A ping after this long without a byte from the client (0: never).
    pub ping_interval: u64,
    /// The connection fails when nothing arrives this long after a ping.
    pub ping_timeout: u64,
}

/// The `date` header, refreshed at most once a second.
struct Date {
    cache: DateCache,
    /// CLOCK_MONOTONIC second of the last refresh.
    second: u64,
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct ServerState {
    pub(crate) app: Py<PyAny>,
    pub(crate) interface: Interface,
    /// `ringloop.server.asgi.run_asgi`: the coroutine that runs an ASGI app and reports how it
    /// ended (or the native-async equivalent).
    pub(crate) runner: Py<PyAny>,
    /// `ringloop.server.wsgi` bridge's `submit(conn, request)`, for WSGI.
    pub(crate) wsgi_submit: Option<Py<PyAny>>,
    pub(crate) loop_: Py<PyAny>,
    pub(crate) limits: Limits,
    /// `--http`: which protocols a connection may speak.
    pub(crate) http: HttpMode,
    /// What every HTTP/2 connection announces and enforces (`--http2-*`).
    pub(crate) h2: super::proto::h2::Settings,
    pub(crate) timeouts: Timeouts,
    pub(crate) root_path: Py<PyString>,
    pub(crate) root_path_bytes: Vec<u8>,
    /// What every request's ASGI scope starts from (see `scope::scope_template`).
    pub(crate) scope_template: Py<PyDict>,
    /// `"http"` or `"https"`.
    pub(crate) scheme: Py<PyString>,
    pub(crate) server_header: Option<Vec<u8>>,
    /// `--header`: fields every response gets unless the application set the same name.
    pub(crate) default_headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) date_header: bool,
    /// The lifespan state every request gets a copy of (`None`: lifespan not run).
    pub(crate) lifespan_state: GilCell<Option<Py<PyDict>>>,
    /// `access(client, method, path, query, http_version, status, body_bytes, seconds)` after
    /// each response, if access logs are on.
    pub(crate) access_log: Option<Py<PyAny>>,
    /// `error(message, exc)`: logs an application's exception with its traceback.
    pub(crate) log_error: Py<PyAny>,
    /// `debug(message)`: a rejected request's rule, logged at debug level.
    pub(crate) log_debug: Option<Py<PyAny>>,
    /// `trusted(host) -> bool` for `--proxy-headers` (`None`: proxy headers ignored).
    pub(crate) proxy_trusted: Option<Py<PyAny>>,
    /// `proxy_trusted`'s answers for the peers' hosts seen so far (`peer_trusted`).
    trusted_hosts: GilCell<HashMap<String, bool>>,
    /// More requests in flight than this get a 503 (`--limit-concurrency`).
    pub(crate) limit_concurrency: Option<u64>,
    /// After this many requests the worker stops gracefully (`--limit-max-requests`).
    pub(crate) max_requests: Option<u64>,
    /// Called once when `max_requests` is reached.
    pub(crate) on_max_requests: Option<Py<PyAny>>,
    pub(crate) ws: Option<WsSettings>,
    /// The native WebSocket handler (`native_handler(..., websocket=...)`).
    pub(crate) ws_handler: Option<Py<PyAny>>,
    date: GilCell<Date>,
    pub(crate) requests: AtomicU64,
    /// Requests in their application: each cycle holds one count (`stream::InFlight`).
    pub(crate) in_flight: Arc<AtomicU64>,
    pub(crate) shutting_down: AtomicBool,
    /// While shutting down, an idle keep-alive connection is closed once it has been idle this
    /// long (ns): one whose client is looping requests gets the next one answered with
    /// `connection: close` instead of a close that races with that request (`shutdown`).
    pub(crate) drain_idle: AtomicU64,
    /// Connections keep their latest request for the watch (`watch.rs`).
    pub(crate) track_requests: AtomicBool,
    next_id: AtomicU64,
    pub(crate) conns: GilCell<HashMap<u64, Py<PyAny>>>,
    /// `--static-path-*`: directories served before the application (`files`), set once.
    pub(crate) files: std::sync::OnceLock<super::files::Mounts>,
}

impl ServerState {
    /// The `date` value for a response now (recomputed when the second changed).
    pub(crate) fn with_date<R>(&self, py: Python<'_>, f: impl FnOnce(Option<&[u8]>) -> R) -> PyResult<R> {
        if !self.date_header {
            return Ok(f(None));
        }
        let mut d = self.date.borrow_mut(py)?;
        let second = monotonic_ns() / 1_000_000_000;
        if second != d.second {
            d.cache.refresh(SystemTime::now());
            d.second = second;
        }
        Ok(f(Some(d.cache.value())))
    }

    pub(crate) fn register(&self, py: Python<'_>, conn: Py<PyAny>) -> PyResult<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.conns.borrow_mut(py)?.insert(id, conn);
        Ok(id)
    }

    pub(crate) fn unregister(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        let gone = self.conns.borrow_mut(py)?.remove(&id);
        drop(gone);
        Ok(())
    }

    /// Whether a connection's peer (`(host, port)`, or `None` on a Unix socket) is a trusted
    /// proxy. The answer depends on the host alone (`--forwarded-allow-ips` is fixed at start),
    /// so it is asked of Python once per host, not once per connection: a server behind a proxy
    /// sees the same few hosts on every connection. At most `TRUSTED_CACHE` hosts are kept.
    pub(crate) fn peer_trusted(&self, client: &Bound<'_, PyAny>) -> PyResult<bool> {
        const TRUSTED_CACHE: usize = 1024;
        let py = client.py();
        let Some(trusted) = &self.proxy_trusted else { return Ok(false) };
        let host = client.cast::<pyo3::types::PyTuple>().ok().and_then(|t| t.get_item(0).ok());
        let host = host.as_ref().and_then(|h| h.cast::<PyString>().ok());
        let Some(host) = host.as_ref().and_then(|h| h.to_str().ok()) else {
            return trusted.call1(py, (client,))?.is_truthy(py);
        };
        if let Some(&known) = self.trusted_hosts.borrow(py)?.get(host) {
            return Ok(known);
        }
        let answer = trusted.call1(py, (client,))?.is_truthy(py)?;
        let mut hosts = self.trusted_hosts.borrow_mut(py)?;
        if hosts.len() >= TRUSTED_CACHE {
            hosts.clear();
        }
        hosts.insert(host.to_owned(), answer);
        Ok(answer)
    }

    /// Count one finished request; `true` when it was the last one `max_requests` allows.
    /// The ASGI `http` scope of `head` on a connection whose reused scope is `base`, from a
    /// peer at `client` (its proxy headers obeyed when the peer is `trusted` and the server
    /// trusts proxies) seen at `local`: both drivers' `Sink::scope`.
    pub(crate) fn request_scope<'py>(&self, py: Python<'py>, base: &mut ConnScope, head: &HeadCopy, client: Py<PyAny>, local: &Py<PyAny>, trusted: bool) -> PyResult<Bound<'py, PyDict>> {
        let (mut client, mut scheme) = (client, self.scheme.clone_ref(py));
        if trusted {
            if let Some(check) = &self.proxy_trusted {
                let (c, s) = forwarded(py, head, check.bind(py))?;
                client = c.unwrap_or(client);
                scheme = s.unwrap_or(scheme);
            }
        }
        let state = self.lifespan_state.borrow(py)?.as_ref().map(|s| s.clone_ref(py));
        let origin = Origin { client: &client, local, scheme: &scheme };
        base.scope(py, head, &origin, state.as_ref())
    }

    pub(crate) fn count_request(&self) -> bool {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_requests == Some(n)
    }

    pub(crate) fn snapshot(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        Ok(self.conns.borrow(py)?.values().map(|c| c.clone_ref(py)).collect())
    }
}

#[pymethods]
impl ServerState {
    #[new]
    #[pyo3(signature = (
        app, interface, runner, loop_, *,
        max_request_line = 8 * 1024, max_header_bytes = 16 * 1024, max_headers = 100,
        max_body = None, timeout_keep_alive = 5.0, timeout_head = 10.0, timeout_body = 30.0,
        root_path = "", scheme = "http", server_header = Some("ringloop".to_owned()),
        date_header = true, access_log = None, log_error, log_debug = None, proxy_trusted = None,
        limit_concurrency = None, max_requests = None, on_max_requests = None, wsgi_submit = None,
        headers = Vec::new(), ws = "auto", ws_max_size = 16 * 1024 * 1024, ws_ping_interval = Some(20.0),
        ws_ping_timeout = Some(20.0), ws_per_message_deflate = true, ws_handler = None,
        http = "auto", http2_max_concurrent_streams = 100, http2_initial_stream_window_size = 256 * 1024,
        http2_initial_connection_window_size = 1024 * 1024, http2_max_headers_size = 32 * 1024,
        http2_max_frame_size = 16 * 1024, http2_max_reset_streams = 100, http2_max_empty_frames = 100,
        http2_send_timeout = 30.0, http2_keep_alive_interval = 0, http2_keep_alive_timeout = 20.0,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        app: Py<PyAny>,
        interface: &str,
        runner: Py<PyAny>,
        loop_: Py<PyAny>,
        max_request_line: usize,
        max_header_bytes: usize,
        max_headers: usize,
        max_body: Option<u64>,
        timeout_keep_alive: f64,
        timeout_head: f64,
        timeout_body: f64,
        root_path: &str,
        scheme: &str,
        server_header: Option<String>,
        date_header: bool,
        access_log: Option<Py<PyAny>>,
        log_error: Py<PyAny>,
        log_debug: Option<Py<PyAny>>,
        proxy_trusted: Option<Py<PyAny>>,
        limit_concurrency: Option<u64>,
        max_requests: Option<u64>,
        on_max_requests: Option<Py<PyAny>>,
        wsgi_submit: Option<Py<PyAny>>,
        headers: Vec<(String, String)>,
        ws: &str,
        ws_max_size: usize,
        ws_ping_interval: Option<f64>,
        ws_ping_timeout: Option<f64>,
        ws_per_message_deflate: bool,
        ws_handler: Option<Py<PyAny>>,
        http: &str,
        http2_max_concurrent_streams: u32,
        http2_initial_stream_window_size: u32,
        http2_initial_connection_window_size: u32,
        http2_max_headers_size: u32,
        http2_max_frame_size: u32,
        http2_max_reset_streams: usize,
        http2_max_empty_frames: usize,
        http2_send_timeout: f64,
        http2_keep_alive_interval: u64,
        http2_keep_alive_timeout: f64,
    ) -> PyResult<ServerState> {
        let http = HttpMode::parse(http)?;
        let mut h2 = h2_settings(
            http2_max_concurrent_streams,
            http2_initial_stream_window_size,
            http2_initial_connection_window_size,
            http2_max_headers_size,
            http2_max_frame_size,
            http2_max_reset_streams,
            http2_max_empty_frames,
        )?;
        let ns = |s: f64, what: &str| -> PyResult<u64> {
            if s.is_nan() || s < 0.0 {
                return Err(PyValueError::new_err(format!("{what} must be >= 0 seconds, got {s}")));
            }
            Ok((s * 1e9) as u64)
        };
        if let Some(v) = &server_header {
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(PyValueError::new_err("the server header may not contain CR, LF or NUL"));
            }
        }
        for (n, v) in &headers {
            if n.is_empty() || n.bytes().chain(v.bytes()).any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(PyValueError::new_err(format!("invalid default header {n}: {v:?}")));
            }
        }
        let interface = Interface::parse(interface)?;
        let speaks_ws = interface == Interface::Asgi || (ws_handler.is_some() && interface != Interface::Wsgi);
        let ws = match (ws, speaks_ws) {
            ("off", _) | ("auto", false) => None,
            ("on" | "auto", true) => Some(WsSettings {
                config: super::proto::ws::Config { max_message: ws_max_size.max(1), ..super::proto::ws::Config::default() },
                deflate: ws_per_message_deflate.then(super::proto::ws::DeflateConfig::default),
                ping_interval: ns(ws_ping_interval.unwrap_or(0.0), "ws_ping_interval")?,
                ping_timeout: ns(ws_ping_timeout.unwrap_or(0.0), "ws_ping_timeout")?,
            }),
            ("on", false) => {
                return Err(PyValueError::new_err(format!(
                    "--ws on: the {interface:?} interface has no WebSocket handler (ASGI apps, and native handlers given websocket=, have)"
                )))
            }
            (other, _) => return Err(PyValueError::new_err(format!("--ws: {other:?} is not one of auto, on, off"))),
        };
        // SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441) where WebSocket is served: without it
        // a client opens its WebSocket over HTTP/1.1, and h2 refuses a `:protocol`.
        h2.enable_connect_protocol = ws.is_some();
        let limits = Limits { max_request_line, max_header_bytes, max_headers: max_headers.min(256), max_body, ..Limits::default() };
        let scheme = PyString::new(py, scheme);
        let root_path = PyString::new(py, root_path);
        let scope_template = super::scope::scope_template(py, &scheme, &root_path)?.unbind();
        Ok(ServerState {
            app,
            interface,
            runner,
            wsgi_submit,
            loop_,
            limits,
            http,
            h2,
            timeouts: Timeouts {
                keep_alive: ns(timeout_keep_alive, "timeout_keep_alive")?,
                head: ns(timeout_head, "timeout_head")?,
                body: ns(timeout_body, "timeout_body")?,
                h2_send: ns(http2_send_timeout, "http2_send_timeout")?,
                h2_ping_interval: h2_ping_interval(http2_keep_alive_interval)?,
                h2_ping_timeout: h2_ping_timeout(http2_keep_alive_timeout)?,
            },
            root_path_bytes: root_path.to_str()?.as_bytes().to_vec(),
            root_path: root_path.unbind(),
            scope_template,
            scheme: scheme.unbind(),
            server_header: server_header.map(String::into_bytes),
            default_headers: headers.into_iter().map(|(n, v)| (n.to_ascii_lowercase().into_bytes(), v.into_bytes())).collect(),
            date_header,
            lifespan_state: GilCell::new(None),
            access_log,
            log_error,
            log_debug,
            proxy_trusted,
            trusted_hosts: GilCell::new(HashMap::new()),
            limit_concurrency,
            max_requests,
            on_max_requests,
            ws,
            ws_handler,
            date: GilCell::new(Date { cache: DateCache::new(SystemTime::now()), second: monotonic_ns() / 1_000_000_000 }),
            requests: AtomicU64::new(0),
            in_flight: Arc::new(AtomicU64::new(0)),
            shutting_down: AtomicBool::new(false),
            drain_idle: AtomicU64::new(0),
            track_requests: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            conns: GilCell::new(HashMap::new()),
            files: std::sync::OnceLock::new(),
        })
    }

    /// `--static-path-*`: `(route, directory, expires seconds)` per mount, set once before
    /// serving. A bad route or directory is a `ValueError` naming the flag.
    fn set_static_files(&self, mounts: Vec<(String, String, u64)>) -> PyResult<()> {
        let m = super::files::Mounts::new(&mounts).map_err(PyValueError::new_err)?;
        self.files.set(m).map_err(|_| PyValueError::new_err("static files are already set"))
    }

    /// The state lifespan's startup left (`scope["state"]` is a shallow copy of it per request).
    fn set_lifespan_state(&self, py: Python<'_>, state: Option<Py<PyDict>>) -> PyResult<()> {
        let old = std::mem::replace(&mut *self.lifespan_state.borrow_mut(py)?, state);
        drop(old);
        Ok(())
    }

    /// Requests answered so far.
    #[getter]
    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests whose response is not finished.
    #[getter]
    fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Open connections.
    #[getter]
    fn connections(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.conns.borrow(py)?.len())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.app)?;
        visit.call(&self.runner)?;
        visit.call(&self.wsgi_submit)?;
        visit.call(&self.ws_handler)?;
        visit.call(&self.loop_)?;
        visit.call(&self.access_log)?;
        visit.call(&self.log_error)?;
        visit.call(&self.log_debug)?;
        visit.call(&self.proxy_trusted)?;
        visit.call(&self.on_max_requests)?;
        visit.call(&self.scope_template)?;
        if let Some(s) = self.lifespan_state.try_borrow_unattached() {
            visit.call(&*s)?;
        }
        if let Some(conns) = self.conns.try_borrow_unattached() {
            for c in conns.values() {
                visit.call(c)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = self.conns.try_borrow_mut_unattached().map(|mut c| std::mem::take(&mut *c));
        drop(taken);
    }
}
