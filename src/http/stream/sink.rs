//! `Sink`: what a stream asks of the connection that carries it. The driver (`conn`)
//! implements it for its connection type; a `Stream` holds the connection as a plain object
//! beside a `&'static dyn Sink` (a function table, as the stream transport's `NativeSink`),
//! so that no interface names the driver, and one driver may carry many streams (HTTP/2).
//!
//! Every call names its stream by `id`: a call for a stream that is over (its response ended,
//! its connection lost) is answered as such (`Ok(false)`, `None`, `Got::Disconnect` or
//! `ClientDisconnected`), never applied to the connection's next stream.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::dispatch::Spare;
use super::message::Got;
use crate::http::request::HeadCopy;
use crate::http::server::{Interface, ServerState};
use crate::transport::stream::StreamIO;

/// The connection's ends, for a request object: `(host, port)` or `None` each, and the
/// native transport (its TLS session details). Borrowed from the connection (`Sink::peer`).
pub(crate) struct Peer<'a> {
    pub(crate) client: &'a Py<PyAny>,
    pub(crate) local: &'a Py<PyAny>,
    pub(crate) io: Option<&'a Py<StreamIO>>,
}

/// Where a stream's response stands (see `Sink::progress`).
#[derive(Clone, Copy)]
pub(crate) struct Progress {
    /// Bytes of the response head were produced.
    pub(crate) started: bool,
    /// The response ended.
    pub(crate) complete: bool,
}

pub(crate) trait Sink: Sync {
    /// Open the stream `id` for the request `head` (`Dispatch::start`): from here it counts in
    /// flight, the blocking watch shows `subject` (its scope, its `Request`) for it, and the
    /// calls below reach it, until its response ends.
    fn open(&self, conn: &Bound<'_, PyAny>, id: u64, head: &HeadCopy, subject: &Bound<'_, PyAny>) -> PyResult<()>;
    /// The ASGI `http` scope of `head` on this connection: its ends, scheme (proxy headers
    /// believed from a trusted peer), TLS extension and the lifespan state.
    fn scope<'py>(&self, conn: &Bound<'py, PyAny>, head: &HeadCopy) -> PyResult<Bound<'py, PyDict>>;
    /// `f` called with the connection's ends, under the connection's borrow: it must run no
    /// Python code and allocate no Python object (copies of references only).
    fn peer(&self, conn: &Bound<'_, PyAny>, f: &mut dyn FnMut(Peer<'_>) -> PyResult<()>) -> PyResult<()>;
    /// The configuration of the worker the connection belongs to.
    fn server<'a>(&self, conn: &'a Bound<'_, PyAny>) -> &'a ServerState;
    /// Run the application's coroutine in the connection's task, its first step now. `send`:
    /// the ASGI `send` told how it ended; `name`: the method and path the task is named after.
    fn run(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>, send: Option<&Bound<'_, PyAny>>, name: Option<(&Bound<'_, PyString>, &Bound<'_, PyString>)>) -> PyResult<()>;
    /// Read the body of stream `id` whole (at most `declared` bytes if given), then hand it
    /// and `request` to `Dispatch::collected`.
    fn collect(&self, conn: &Bound<'_, PyAny>, id: u64, request: Py<PyAny>, declared: Option<u64>) -> PyResult<()>;
    /// What the interface kept for the connection's next request (`Spare`), taken.
    fn take_spare(&self, conn: &Bound<'_, PyAny>) -> PyResult<Option<Spare>>;
    fn keep_spare(&self, conn: &Bound<'_, PyAny>, spare: Spare) -> PyResult<()>;

    /// Request body: what is buffered (answering `Expect: 100-continue` first), or `Wait`.
    fn poll_body(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Got>;
    /// A `receive` waits on `waiter` (a future) for body or the end; `false`: the stream is
    /// over (answer the disconnect now). Raises if another `receive` already waits.
    fn wait_body(&self, conn: &Bound<'_, PyAny>, id: u64, waiter: &Bound<'_, PyAny>) -> PyResult<bool>;
    /// Body was consumed: reading may resume (back-pressure).
    fn body_taken(&self, conn: &Bound<'_, PyAny>) -> PyResult<()>;
    /// A `receive` of stream `id` waits (`wait_body`): what a WebSocket session, which reads
    /// for it, asks before decoding a message.
    fn receive_waits(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<bool>;
    /// Answer the `receive` waiting on stream `id` with `msg` (nothing if none waits).
    fn answer_receive(&self, conn: &Bound<'_, PyAny>, id: u64, msg: &Bound<'_, PyAny>) -> PyResult<()>;

    /// The response's status and fields (`headers`: the application's object), written with
    /// the first body or at the end of the loop iteration.
    fn start(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, headers: Option<Py<PyAny>>) -> PyResult<()>;
    /// The response will end with trailers (ASGI `http.response.start`'s `trailers`): its last
    /// body does not end it, the `trailers` message does.
    fn expect_trailers(&self, _conn: &Bound<'_, PyAny>, _id: u64) -> PyResult<()> {
        Ok(())
    }
    /// `http.response.trailers`: fields (`headers`: the application's object) sent after the
    /// body; `more`: more trailer messages follow. Sent only to a client that said
    /// `te: trailers` (the scope announced the extension to it), else dropped; on HTTP/1.1
    /// only after a chunked body.
    fn trailers(&self, _conn: &Bound<'_, PyAny>, _id: u64, _headers: Option<Py<PyAny>>, _more: bool) -> PyResult<()> {
        Err(pyo3::exceptions::PyRuntimeError::new_err("Unexpected ASGI message type 'http.response.trailers'."))
    }
    /// `http.response.early_hint`: a `103 Early Hints` interim response with one `link` field
    /// per entry of `links`, before `start`'s head (refused after it); dropped for an HTTP/1.0
    /// client (RFC 8297 §3 and RFC 9110 §15.2: no 1xx to HTTP/1.0).
    fn early_hint(&self, _conn: &Bound<'_, PyAny>, _id: u64, _links: &[Vec<u8>]) -> PyResult<()> {
        Err(pyo3::exceptions::PyRuntimeError::new_err("Unexpected ASGI message type 'http.response.early_hint'."))
    }
    /// Body bytes (`more`: not the last), behind the head.
    fn body(&self, conn: &Bound<'_, PyAny>, id: u64, body: &Bound<'_, PyBytes>, more: bool) -> PyResult<()>;
    /// The head of a response whose body is a file of `size` bytes (`send_file` sends it);
    /// `false` when the stream is over (nothing to send).
    fn file_head(&self, conn: &Bound<'_, PyAny>, id: u64, size: u64) -> PyResult<bool>;
    /// The body after `file_head`: `count` bytes of `file` (a binary file object) from
    /// `offset`, as an awaitable done once they are written. The driver sends them as its
    /// transport can (the kernel's `sendfile(2)` on cleartext; read and encrypted over TLS,
    /// never sent in the clear); a stream or connection that is over gets an awaitable done at
    /// once. `end` follows either way.
    fn send_file<'py>(&self, conn: &Bound<'py, PyAny>, id: u64, file: &Bound<'py, PyAny>, offset: u64, count: u64) -> PyResult<Bound<'py, PyAny>>;
    /// The response ended (after `file_head`).
    fn end(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
    /// The application ended the stream unfinished: 500 if nothing was written, else the
    /// connection closes.
    fn abandon(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
    /// End stream `id` with the server's own error answer `status` (if no response byte was
    /// written yet), `rule` logged at debug level, and the connection closes.
    fn fail(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, rule: &'static str) -> PyResult<()>;
    /// Where the response stands; `None` once the stream is over.
    fn progress(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Option<Progress>>;

    /// Stream `id` may not write more now: the connection's buffer is above its high-water
    /// mark, or (HTTP/2) the stream's flow-control window holds bytes it has not taken yet.
    /// `send` then waits (`drained`).
    fn write_blocked(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<bool>;
    /// A future resolved when stream `id` may write again (see `write_blocked`).
    fn drained(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Py<PyAny>>;
    fn is_lost(&self, conn: &Bound<'_, PyAny>) -> PyResult<bool>;
    /// Run `coro` for this stream in the connection's task.
    fn spawn(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>) -> PyResult<()>;
    /// What the application is called in logs ("ASGI callable", …).
    fn app_name(&self, conn: &Bound<'_, PyAny>) -> &'static str {
        match self.server(conn).interface {
            Interface::Asgi => "ASGI callable",
            Interface::Wsgi => "WSGI application",
            _ => "native handler",
        }
    }
    /// The server's error log (`log_error(message, exc)`).
    fn log_error(&self, conn: &Bound<'_, PyAny>, message: String, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        self.server(conn).log_error.call1(conn.py(), (message, exc)).map(drop)
    }
    /// The server's Python runner (`ringloop.server.asgi`'s `run_asgi` helpers).
    fn runner<'py>(&self, conn: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.server(conn).runner.bind(conn.py()).clone())
    }
    fn loop_<'py>(&self, conn: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.server(conn).loop_.bind(conn.py()).clone())
    }

    /// WebSocket (a session over the stream's upgraded channel): ASGI's `receive`.
    fn ws_receive<'py>(&self, conn: &Bound<'py, PyAny>, id: u64) -> PyResult<Bound<'py, PyAny>>;
    /// ASGI's `send` of a `websocket.*` message of type `ty`.
    fn ws_send(&self, conn: &Bound<'_, PyAny>, id: u64, ty: &str, msg: &Bound<'_, PyDict>) -> PyResult<()>;
    /// The application ended (`error`: it raised): `true` if the session took it, `false`
    /// when the upgrade was denied and the stream is an HTTP one.
    fn ws_ended(&self, conn: &Bound<'_, PyAny>, id: u64, error: bool) -> PyResult<bool>;
}
