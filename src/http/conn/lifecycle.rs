//! A connection's life outside its requests: the timeouts the server's sweep checks (idle
//! keep-alive, a slow request head, a stalled body), the graceful shutdown, and the abort.

use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;

use super::HttpConn;
use crate::http::proto::h1::Phase;

/// How long a connection half-closed after an error answer reads what its client still sends
/// before it is closed anyway (as nginx's `lingering_timeout`-like bound).
const LINGER_NS: u64 = 2_000_000_000;

impl HttpConn {
    /// Close a connection whose phase outlived its timeout (`ServerState::sweep`); `true` if
    /// it did.
    pub(crate) fn check_timeout(slf: &Bound<'_, Self>, now: u64) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if let Some(h2) = this.h2(py)? {
            return crate::http::h2conn::H2Conn::check_timeout(h2.bind(py), now);
        }
        let server = this.server.get();
        let t = &server.timeouts;
        // Shutting down: an idle connection goes once idle for the drain grace (`shutdown`).
        let drain = server.shutting_down.load(Ordering::Relaxed).then(|| server.drain_idle.load(Ordering::Relaxed));
        if let Some(s) = Self::session(slf)? {
            // A WebSocket session has its own clock: pings, and the close handshake's timeout.
            return crate::http::websocket::check_timeout(s, now);
        }
        let verdict = {
            let st = this.st.borrow(py)?;
            if st.lingering && !st.lost && now.saturating_sub(st.since) > LINGER_NS {
                drop(st);
                Self::abort(slf)?;
                return Ok(true);
            }
            if st.lost || st.close_after {
                None
            } else {
                let idle_for = now.saturating_sub(st.since);
                match st.h1.phase() {
                    Phase::Idle if st.cycle.is_none() && drain.is_some_and(|grace| idle_for >= grace) => Some(None),
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
            None => return Ok(false),
            Some(None) => Self::close_when_flushed(slf)?,
            Some(Some(rule)) => Self::reject(slf, 408, rule)?,
        }
        Self::flush(slf)?;
        Ok(true)
    }

    /// Graceful shutdown: busy connections close after their response; idle ones now if they
    /// have been idle for the drain grace, else when the sweep finds they have (`check_timeout`).
    pub(crate) fn begin_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        if let Some(h2) = slf.get().h2(py)? {
            return crate::http::h2conn::H2Conn::begin_shutdown(h2.bind(py));
        }
        if let Some(s) = Self::session(slf)? {
            if crate::http::websocket::begin_shutdown(s)? {
                return Ok(());
            }
        }
        let idle = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.h1.set_close();
            // A request that already reached us (in `h1`, or still in the socket) is served,
            // with `connection: close`, rather than dropped: its client could not tell a close
            // here from a lost request. A stalled one meets its head timeout or the abort at
            // the end of the graceful period.
            let fd = st.io.as_ref().map(|io| io.get().fd());
            let pending = st.h1.buffered() > 0 || fd.is_some_and(|fd| crate::reactor::sys::bytes_waiting(fd) > 0);
            let grace = slf.get().server.get().drain_idle.load(Ordering::Relaxed);
            st.cycle.is_none()
                && !st.static_sending
                && !pending
                && crate::reactor::sys::monotonic_ns().saturating_sub(st.since) >= grace
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
}
