//! WebSocket sessions: the sans-I/O codec (`ws`) run over a stream's upgraded channel
//! (`channel::Channel`, which the driver implements: this module names no driver) and joined
//! to ASGI's `websocket` scope (`asgi`) or to a native handler (`native`). This module holds
//! the session's state and its side of the channel: where bytes go after the accept, the close
//! handshake when no one reads, keep-alive pings, graceful shutdown.
//!
//! A session's life, in the channel's slot for it (`channel::Parts::ws`):
//! ```text
//!   Handshake(upgrade) ──websocket.accept──▶ Open(ws::Conn) ──close sent and received, or EOF,
//!        │                                        │            or a protocol fault──▶ TCP closed
//!        └─websocket.close / websocket.http.response / the app ends─▶ an HTTP answer (403, 500,
//!          the app's own), `ws` dropped, and the connection is HTTP/1.1 again
//! ```
//! The request's stream lives as long as the application runs (it counts in flight, it is
//! what `receive` and `send` are bound to); the session can outlive it, to finish the close
//! handshake (`Channel::release`), and the channel closes once the session is `Done`.
//!
//! Reading is driven by the application: a message is decoded when `receive` asks for one, so
//! a slow application holds the client back through TCP (`ws::Conn::wants_read` pauses the
//! socket at `max_buffered` unread bytes) instead of queueing messages in memory. When no one
//! will ask any more — our close frame is out, or the application returned — the channel
//! reads on by itself and drops data messages until the peer's close (`drain`).

pub(crate) mod asgi;
pub(crate) mod channel;
pub(crate) mod handshake;
pub mod native;

use pyo3::prelude::*;

pub(crate) use channel::{Channel, Parts, Session};
use super::proto::ws;
use crate::reactor::sys::monotonic_ns;

/// How long the peer has to answer our close frame before the TCP connection is closed anyway
/// (the `websockets` library's `close_timeout` is 10 s; a browser answers in one round trip).
const CLOSE_TIMEOUT_NS: u64 = 5_000_000_000;

pub(crate) enum Phase {
    /// The upgrade request is with the application: it accepts, or answers with HTTP.
    Handshake(Box<ws::Upgrade>),
    Open(Box<ws::Conn>),
}

/// What reading an open session gave (`read`).
pub(crate) enum Read<T> {
    /// A data message, as the caller's `text`/`binary` made it.
    Message(T),
    /// No whole message buffered: wait for bytes.
    Wait,
    /// Nothing buffered and the transport is gone.
    Lost,
    /// The session ended here: the peer's close (its code and reason), EOF, or a fault.
    End(u16, String),
}

/// The next data message of an open session, control frames answered into `out` on the way:
/// the one read loop of the ASGI `receive`, the native handler's delivery and `drain`.
/// `text`/`binary` make the message inside the connection's borrow (`str` and `bytes` only:
/// see `Channel::parts`).
pub(crate) fn read<T>(c: &mut ws::Conn, out: &mut Vec<u8>, lost: bool, text: impl FnOnce(&str) -> T, binary: impl FnOnce(&[u8]) -> T) -> Read<T> {
    loop {
        match c.poll(out) {
            Ok(ws::Event::Text(s)) => return Read::Message(text(s)),
            Ok(ws::Event::Binary(b)) => return Read::Message(binary(b)),
            Ok(ws::Event::Ping(_)) | Ok(ws::Event::Pong(_)) => {}
            Ok(ws::Event::NeedData) if lost => return Read::Lost,
            Ok(ws::Event::NeedData) => return Read::Wait,
            Ok(ws::Event::Close { code, reason }) => return Read::End(code.unwrap_or(ws::code::NO_STATUS), reason.to_owned()),
            Ok(ws::Event::Closed) => return Read::End(c.close_code().unwrap_or(ws::code::ABNORMAL), String::new()),
            Err(e) => return Read::End(e.code(), String::new()),
        }
    }
}

/// One WebSocket session of a connection (see the module docs).
pub(crate) struct WsState {
    /// The stream the session runs on (its request's, whose application owns the session).
    pub(crate) stream: u64,
    pub(crate) phase: Phase,
    /// `websocket.connect` was handed to the application.
    pub(crate) connect_given: bool,
    /// The session ended: the code (and reason) every later `receive` is told.
    pub(crate) ended: Option<(u16, String)>,
    /// The application returned: nobody will `receive` any more.
    pub(crate) app_done: bool,
    /// When our close frame was written (for `CLOSE_TIMEOUT_NS`).
    pub(crate) close_sent_at: u64,
    /// When our keep-alive ping was written, until a byte arrives after it.
    pub(crate) ping_sent_at: Option<u64>,
    /// A native session's `WebSocket` (its handler's callbacks are called from here).
    pub(crate) native: Option<Py<native::WebSocket>>,
}

impl WsState {
    pub(crate) fn new(stream: u64, upgrade: ws::Upgrade) -> WsState {
        WsState {
            stream,
            phase: Phase::Handshake(Box::new(upgrade)),
            connect_given: false,
            ended: None,
            app_done: false,
            close_sent_at: 0,
            ping_sent_at: None,
            native: None,
        }
    }

    pub(crate) fn conn(&mut self) -> Option<&mut ws::Conn> {
        match &mut self.phase {
            Phase::Open(c) => Some(c),
            Phase::Handshake(_) => None,
        }
    }

    /// Start the close handshake with `code` (ignored if a close was already sent or received).
    pub(crate) fn close(&mut self, out: &mut Vec<u8>, code: u16, reason: &str) -> bool {
        self.try_close(out, code, reason).is_ok()
    }

    /// `close` for a code and reason the application chose: `Closing` when a close was
    /// already sent or received (nothing to do), another `SendError` for an invalid one.
    pub(crate) fn try_close(&mut self, out: &mut Vec<u8>, code: u16, reason: &str) -> Result<(), ws::SendError> {
        let Some(c) = self.conn() else { return Err(ws::SendError::Closing) };
        c.close(out, Some(code), reason)?;
        self.close_sent_at = monotonic_ns();
        Ok(())
    }

    /// Whether the session is past its handshake and no one will read it but the channel.
    fn draining(&self) -> bool {
        match &self.phase {
            Phase::Open(c) => self.app_done || c.state() != ws::State::Open,
            Phase::Handshake(_) => false,
        }
    }
}


/// The session in `slot`, if it is past its handshake.
pub(crate) fn open(slot: &mut Option<Box<WsState>>) -> Option<&mut WsState> {
    slot.as_deref_mut().filter(|w| matches!(w.phase, Phase::Open(_)))
}

/// Outgoing frames gathered past this many bytes are written at once: the transport then says
/// when its buffer is full (`pause_writing`) and the next send learns of it, where frames
/// gathered for the end of the loop iteration would grow without bound under an application
/// that sends in a loop without yielding.
const FLUSH_AT: usize = 64 * 1024;

/// Frames were added to the channel's output by a send: written now past `FLUSH_AT`, else
/// at the end of the loop iteration.
pub(crate) fn frames_added(s: Session<'_, '_>) -> PyResult<()> {
    if s.with(|p| p.out.len())? >= FLUSH_AT {
        return s.flush();
    }
    s.queue_flush()
}

/// Bytes from the peer, for an open session in `slot` (`false`: not one; they go to the
/// request's protocol).
pub(crate) fn feed(slot: &mut Option<Box<WsState>>, data: &[u8]) -> bool {
    match open(slot).and_then(WsState::conn) {
        Some(c) => {
            c.feed(data);
            true
        }
        None => false,
    }
}

/// Whether the peer should be read, for an open session in `slot`: its buffer has room, and
/// the transport takes what we write (`write_paused`: a client that sends pings and never
/// reads its pongs is not read either).
pub(crate) fn wants_read(slot: &mut Option<Box<WsState>>, write_paused: bool) -> Option<bool> {
    open(slot).and_then(WsState::conn).map(|c| c.wants_read() && !write_paused)
}

/// Act on what arrived for an open session: answer a waiting `receive`, or drain.
pub(crate) fn process(s: Session<'_, '_>) -> PyResult<()> {
    let native = s.with(|p| p.ws.as_deref().is_some_and(|w| w.native.is_some()))?;
    if native {
        native::deliver(s)?;
    } else if s.ch.receive_waits(s.conn, s.id)? {
        asgi::answer_receiver(s)?;
    } else {
        drain(s)?;
    }
    s.update_reading()
}

/// Read on for a session no one reads (see the module docs): data messages are dropped,
/// pings answered, and the channel closes at the peer's close, EOF or a fault.
pub(crate) fn drain(s: Session<'_, '_>) -> PyResult<()> {
    let (finished, wrote) = s.with(|p| {
        let before = p.out.len();
        let Some(w) = p.ws.as_deref_mut().filter(|w| w.draining()) else { return (false, false) };
        let Phase::Open(c) = &mut w.phase else { return (false, false) };
        let finished = loop {
            // Data messages are dropped unmade.
            match read(c, p.out, false, |_| (), |_| ()) {
                Read::Message(()) => {}
                Read::Wait | Read::Lost => break None,
                Read::End(code, reason) => break Some((code, reason)),
            }
        };
        if let Some(end) = &finished {
            w.ended.get_or_insert_with(|| end.clone());
        }
        (finished.is_some(), p.out.len() > before)
    })?;
    if finished {
        s.close()?;
    }
    if wrote || finished {
        s.queue_flush()?;
    }
    Ok(())
}

/// The sweep's look at an open session: a keep-alive ping when the client has been silent for
/// `--ws-ping-interval`, the end when it stays silent `--ws-ping-timeout` after one, and the
/// end when our close frame goes unanswered. `true` if the channel was closed.
pub(crate) fn check_timeout(s: Session<'_, '_>, now: u64) -> PyResult<bool> {
    let Some(settings) = s.server().ws.as_ref() else { return Ok(false) };
    enum Verdict {
        Nothing,
        Flush,
        Close,
    }
    let verdict = s.with(|p| {
        if p.lost || p.closing {
            return Verdict::Nothing;
        }
        let since = p.since;
        let Some(w) = p.ws.as_deref_mut() else { return Verdict::Nothing };
        let (close_sent_at, ping_sent_at) = (w.close_sent_at, w.ping_sent_at);
        let Phase::Open(c) = &mut w.phase else { return Verdict::Nothing };
        match c.state() {
            ws::State::Done => Verdict::Close,
            ws::State::CloseSent if now.saturating_sub(close_sent_at) > CLOSE_TIMEOUT_NS => Verdict::Close,
            ws::State::CloseSent => Verdict::Nothing,
            ws::State::Open => match ping_sent_at {
                // Any byte after the ping shows the peer is there (its pong may wait unread
                // behind messages the application has not asked for yet).
                Some(t) if since > t => {
                    w.ping_sent_at = None;
                    Verdict::Nothing
                }
                Some(t) if settings.ping_timeout > 0 && now.saturating_sub(t) > settings.ping_timeout => {
                    w.close(p.out, ws::code::INTERNAL_ERROR, "keepalive ping timeout");
                    w.ended.get_or_insert_with(|| (ws::code::ABNORMAL, String::new()));
                    Verdict::Close
                }
                Some(_) => Verdict::Nothing,
                None if settings.ping_interval > 0 && now.saturating_sub(since) > settings.ping_interval => {
                    let _ = c.ping(p.out, b"ringloop");
                    w.ping_sent_at = Some(now);
                    Verdict::Flush
                }
                None => Verdict::Nothing,
            },
        }
    })?;
    match verdict {
        Verdict::Nothing => Ok(false),
        Verdict::Flush => {
            s.flush()?;
            Ok(false)
        }
        Verdict::Close => {
            s.close()?;
            s.flush()?;
            Ok(true)
        }
    }
}

/// Graceful shutdown: an open session gets close 1001 (going away) and the close timeout to
/// answer it; one still in its handshake is told at its accept. `false`: no session.
pub(crate) fn begin_shutdown(s: Session<'_, '_>) -> PyResult<bool> {
    let wrote = s.with(|p| p.ws.as_deref_mut().map(|w| w.close(p.out, ws::code::GOING_AWAY, "")))?;
    match wrote {
        None => Ok(false),
        Some(false) => Ok(true),
        Some(true) => {
            s.flush()?;
            drain(s)?;
            Ok(true)
        }
    }
}

/// The application's coroutine ended (`error`: it raised) and the session is open: it is
/// closed with 1000 (1011 after an error) unless it already was, and the stream ends.
pub(crate) fn app_ended(s: Session<'_, '_>, error: bool) -> PyResult<()> {
    s.with(|p| {
        if let Some(w) = p.ws.as_deref_mut().filter(|w| w.stream == s.id) {
            w.app_done = true;
            let code = if error { ws::code::INTERNAL_ERROR } else { ws::code::NORMAL };
            w.close(p.out, code, "");
        }
    })?;
    s.ch.release(s.conn, s.id)?;
    drain(s)?;
    s.queue_flush()
}
