//! `Channel`: what a WebSocket session asks of the stream it runs over, once that stream is
//! upgraded. The driver implements it (HTTP/1.1: the connection itself, after its `101`;
//! HTTP/2: one extended-CONNECT stream, RFC 8441, after its `200`), as it implements the
//! stream's `Sink`, which a channel is first: the session answers its request through the
//! `Sink` (a refusal, a denial, a failure are HTTP responses on the stream) and runs over the
//! `Channel` after the accept. So this module names no driver: a `Session` is the connection
//! as a plain object, the stream's id on it and the function table, as a `Stream` is.
//!
//! A session's state lives in the driver's slot for it (`Parts::ws`), lent under the
//! connection's borrow with the channel's output buffer, where its frames go: the driver frames
//! that buffer for its protocol (HTTP/1.1 writes it as is; HTTP/2 carries it in DATA frames,
//! within the stream's window) and decides when it is written (`flush`, `queue_flush`).

use pyo3::prelude::*;

use super::WsState;
use crate::http::server::ServerState;
use crate::http::stream::Sink;

/// What a session borrows of its channel for a moment (`Channel::parts`).
pub(crate) struct Parts<'a> {
    /// The session's slot: from the upgrade request's head (`Channel::begin`) until it ends.
    pub(crate) ws: &'a mut Option<Box<WsState>>,
    /// Bytes for the peer not written yet: the session's frames are appended here.
    pub(crate) out: &'a mut Vec<u8>,
    /// The transport is gone.
    pub(crate) lost: bool,
    /// The transport's buffer is above its high-water mark.
    pub(crate) write_paused: bool,
    /// The channel closes once `out` is written.
    pub(crate) closing: bool,
    /// When bytes last arrived (CLOCK_MONOTONIC ns).
    pub(crate) since: u64,
}

pub(crate) trait Channel: Sink {
    /// `f` with the session's parts, under the connection's borrow: `f` runs no Python code,
    /// allocates no Python container (a message's `str` or `bytes` only) and calls nothing of
    /// the channel. `id`: the stream the session runs on (HTTP/1.1 carries one session per
    /// connection and needs no id; HTTP/2 finds the stream's).
    fn parts(&self, conn: &Bound<'_, PyAny>, id: u64, f: &mut dyn FnMut(Parts<'_>)) -> PyResult<()>;
    /// The stream `id`, an upgrade request, gets `session` (in its handshake): a `receive`
    /// waiting on the stream is the session's to answer from now on, and is told a
    /// `websocket.disconnect` if the stream ends under it.
    fn begin(&self, conn: &Bound<'_, PyAny>, id: u64, session: Box<WsState>) -> PyResult<()>;
    /// Accept the upgrade of stream `id`: its acceptance head with `fields` (HTTP/1.1:
    /// `101 Switching Protocols`; over HTTP/2 a `200`), and the bytes the peer
    /// sent after the request, the session's first. `None`: the stream is over, nothing
    /// written.
    fn switch(&self, conn: &Bound<'_, PyAny>, id: u64, fields: &[(&[u8], &[u8])]) -> PyResult<Option<Vec<u8>>>;
    /// After `switch`: the acceptance's access-log line, and the request counted.
    fn accepted(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
    /// The stream's application is done with it (an ASGI application returned; a native
    /// session's request ends at the accept): the stream ends, the session goes on.
    fn release(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
    /// Write the output now.
    fn flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()>;
    /// Write the output at the end of the loop iteration.
    fn queue_flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()>;
    /// Close once what is written so far is out (HTTP/1.1: the connection; HTTP/2: stream
    /// `id`, with END_STREAM).
    fn close(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
    /// Read the peer, or pause, as the session of stream `id` wants (`websocket::wants_read`;
    /// HTTP/2: the bytes the session consumed are the client's credit again).
    fn update_reading(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()>;
}

/// A session's handle on its channel: the connection, the stream's id, the function table.
#[derive(Clone, Copy)]
pub(crate) struct Session<'a, 'py> {
    pub(crate) conn: &'a Bound<'py, PyAny>,
    pub(crate) id: u64,
    pub(crate) ch: &'static dyn Channel,
}

impl<'a, 'py> Session<'a, 'py> {
    pub(crate) fn new(conn: &'a Bound<'py, PyAny>, id: u64, ch: &'static dyn Channel) -> Self {
        Session { conn, id, ch }
    }

    pub(crate) fn py(&self) -> Python<'py> {
        self.conn.py()
    }

    /// `f` with the parts (see `Channel::parts`), and what it returned.
    pub(crate) fn with<R>(&self, f: impl FnOnce(Parts<'_>) -> R) -> PyResult<R> {
        let mut f = Some(f);
        let mut r = None;
        self.ch.parts(self.conn, self.id, &mut |p| {
            if let Some(f) = f.take() {
                r = Some(f(p));
            }
        })?;
        Ok(r.expect("`parts` calls its closure"))
    }

    /// The stream's `Sink` (its request's side).
    pub(crate) fn sink(&self) -> &'static dyn Sink {
        self.ch
    }

    pub(crate) fn server(&self) -> &'a ServerState {
        self.ch.server(self.conn)
    }

    pub(crate) fn flush(&self) -> PyResult<()> {
        self.ch.flush(self.conn)
    }

    pub(crate) fn queue_flush(&self) -> PyResult<()> {
        self.ch.queue_flush(self.conn)
    }

    pub(crate) fn close(&self) -> PyResult<()> {
        self.ch.close(self.conn, self.id)
    }

    pub(crate) fn update_reading(&self) -> PyResult<()> {
        self.ch.update_reading(self.conn, self.id)
    }
}
