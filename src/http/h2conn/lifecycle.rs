//! An HTTP/2 connection's life outside its streams, as `HttpConn` passes on the server's
//! calls: the keep-alive timeout (no stream open for `--timeout-keep-alive`), the send
//! timeout (a response waiting on a closed window for `--http2-send-timeout` is reset), the
//! graceful shutdown (GOAWAY: the streams in flight finish, no new one starts, then the
//! connection closes; a WebSocket session gets close 1001 first) and the abort; the sweep's
//! look at each WebSocket session (keep-alive pings, an unanswered close).
//!
//! Keep-alive PINGs (`--http2-keep-alive-interval`/`-timeout`, hyper's `keep_alive_interval`
//! and `keep_alive_timeout`, which granian passes on): after an interval in which the client
//! sent nothing, the sweep sends a PING; if its ACK has not come within the timeout, the
//! client is taken for gone (a dead peer, a NAT that dropped the flow: TCP alone may not tell
//! for hours) and the connection ends with GOAWAY, its streams hearing `http.disconnect`. The
//! PINGs and their ACKs do not touch the keep-alive clock (`since`): an idle connection still
//! gets its GOAWAY after `--timeout-keep-alive`, however well it answers.
//!
//! A GOAWAY of ours needs the client: h2 sends GOAWAY with the highest id, waits for a PING's
//! answer, then the final GOAWAY. A client that never answers is aborted after another
//! keep-alive period (or the drain grace while shutting down), as the sweep finds it.

use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;

use super::{respond, H2Conn};
use crate::http::proto::h2::Reason;
use crate::reactor::sys::monotonic_ns;

/// How long a GOAWAY of ours may go unanswered when no keep-alive timeout is set.
const GOAWAY_WAIT_NS: u64 = 5_000_000_000;

/// The keep-alive PING's state, as the sweep last saw it.
pub(crate) struct KeepAlive {
    /// `Conn::received` at the last sweep, and since when it has not moved.
    heard: u64,
    quiet_since: u64,
    /// When our PING went out, while its ACK has not come.
    sent_at: Option<u64>,
}

impl KeepAlive {
    pub(crate) fn new(now: u64) -> KeepAlive {
        KeepAlive { heard: 0, quiet_since: now, sent_at: None }
    }
}

/// What the sweep does about keep-alive PINGs.
enum Ping {
    Nothing,
    Send,
    /// The ACK did not come in time.
    Dead,
}

impl H2Conn {
    /// The sweep's check (`ServerState::sweep`); `true` if it ended the connection.
    pub(crate) fn check_timeout(slf: &Bound<'_, Self>, now: u64) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        Self::send_timeouts(slf, now)?;
        let keep_alive = server.timeouts.keep_alive;
        let (idle, goaway_at) = {
            let st = this.st.borrow(py)?;
            if st.lost || st.closed {
                return Ok(false);
            }
            (st.core.open_streams() == 0 && st.streams.is_empty(), st.goaway_at)
        };
        super::ws::check_timeouts(slf, now)?;
        if goaway_at.is_none() && server.timeouts.h2_ping_interval > 0 && Self::keep_alive_ping(slf, now)? {
            return Ok(true);
        }
        if let Some(at) = goaway_at {
            let wait = if keep_alive > 0 { keep_alive } else { GOAWAY_WAIT_NS };
            if idle && now.saturating_sub(at) > wait {
                Self::abort(slf)?;
                return Ok(true);
            }
            return Ok(false);
        }
        let since = this.st.borrow(py)?.since;
        let drain = server.shutting_down.load(Ordering::Relaxed).then(|| server.drain_idle.load(Ordering::Relaxed));
        let due = idle && (drain.is_some_and(|g| now.saturating_sub(since) >= g) || (keep_alive > 0 && now.saturating_sub(since) > keep_alive));
        if !due {
            return Ok(false);
        }
        Self::goaway(slf)?;
        Ok(true)
    }

    /// Reset the streams whose response waited on a closed window (the stream's or the
    /// connection's: the client gives no credit) for `--http2-send-timeout` without a byte
    /// taken (CVE-2019-9517: a client that never reads holds each stream's buffered piece and
    /// its application forever otherwise). RST_STREAM CANCEL; the application's waiting
    /// `send()` wakes and the next raises `ClientDisconnected`, as after a client's reset.
    fn send_timeouts(slf: &Bound<'_, Self>, now: u64) -> PyResult<()> {
        let py = slf.py();
        let limit = slf.get().server.get().timeouts.h2_send;
        if limit == 0 {
            return Ok(());
        }
        let due: Vec<(u32, bool)> = {
            let st = slf.get().st.borrow(py)?;
            if st.lost || st.closed {
                return Ok(());
            }
            st.streams
                .iter()
                .filter(|(_, s)| !s.reset && s.pending.is_some() && now.saturating_sub(s.pending_since) > limit)
                .map(|(&id, s)| (id, s.pending.as_ref().is_some_and(|p| p.1) && s.file.is_none()))
                .collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        for (id, complete) in due {
            {
                let mut st = slf.get().st.borrow_mut(py)?;
                st.core.reset(id, Reason::CANCEL);
                if let Some(s) = st.streams.get_mut(&id) {
                    s.pending = None;
                    s.file = None;
                }
            }
            slf.get().log_rule(py, &format!("stream {id} reset: send-timeout"))?;
            if complete {
                // The application gave its last byte (it may be gone): nothing will end the
                // stream but us.
                respond::forget(slf, id)?;
            } else {
                Self::stream_reset(slf, id)?;
            }
        }
        Self::queue_flush(slf)
    }

    /// Keep-alive PINGs (see the module docs); `true` if the connection ended.
    fn keep_alive_ping(slf: &Bound<'_, Self>, now: u64) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let t = &this.server.get().timeouts;
        let ping = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            let received = st.core.received();
            let ka = &mut st.ping;
            if received != ka.heard {
                ka.heard = received;
                ka.quiet_since = now;
            }
            match ka.sent_at {
                Some(at) if st.core.ping_out() => {
                    if now.saturating_sub(at) > t.h2_ping_timeout {
                        Ping::Dead
                    } else {
                        Ping::Nothing
                    }
                }
                _ => {
                    ka.sent_at = None;
                    if now.saturating_sub(ka.quiet_since) >= t.h2_ping_interval && st.core.send_ping() {
                        ka.sent_at = Some(now);
                        Ping::Send
                    } else {
                        Ping::Nothing
                    }
                }
            }
        };
        match ping {
            Ping::Nothing => return Ok(false),
            Ping::Send => {}
            Ping::Dead => {
                if let Some(debug) = &this.server.get().log_debug {
                    let client = this.st.borrow(py)?.client.clone_ref(py);
                    debug.call1(py, ("HTTP/2 keep-alive PING unanswered: closing the connection", client))?;
                }
                let mut st = this.st.borrow_mut(py)?;
                // GOAWAY now (a graceful one would wait on another PING); the abort after the
                // GOAWAY wait (above) covers a client that does not read it either.
                st.goaway_at = Some(now);
                st.core.abort(Reason::NO_ERROR);
            }
        }
        Self::run(slf)?;
        Ok(matches!(ping, Ping::Dead))
    }

    /// Graceful shutdown: GOAWAY now; the streams in flight finish; the core closes the
    /// connection once they have.
    pub(crate) fn begin_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        super::ws::begin_shutdown(slf)?;
        Self::goaway(slf)
    }

    fn goaway(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.goaway_at.is_some() || st.lost {
                return Ok(());
            }
            st.goaway_at = Some(monotonic_ns());
            st.core.graceful_shutdown();
        }
        Self::run(slf)
    }

    pub(crate) fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let t = slf.get().st.borrow(py)?.transport.as_ref().map(|t| t.clone_ref(py));
        if let Some(t) = t {
            t.call_method0(py, intern!(py, "abort"))?;
        }
        Ok(())
    }
}
