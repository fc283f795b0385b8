//! The worker's connections as the server sees them (`ServerState::conns`, filled by
//! `connection_made`): the timeout sweep, graceful shutdown and its deadline. Here, not in
//! `server.rs`: the configuration the connections share does not name the connection type.

use std::sync::atomic::Ordering;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::HttpConn;
use crate::http::server::ServerState;
use crate::reactor::sys::monotonic_ns;

#[pymethods]
impl ServerState {
    /// Close connections whose phase outlived its timeout (called by the server four times a
    /// second). At most `max_cuts` are closed per call: `true` then means "call again soon".
    /// Each close is tens of microseconds of kernel work (a 408, a FIN), so 1,000 slowloris
    /// connections cut at once would stall every other connection for 50-100 ms; in batches
    /// the requests in flight are served between them.
    #[pyo3(signature = (max_cuts = usize::MAX))]
    fn sweep(&self, py: Python<'_>, max_cuts: usize) -> PyResult<bool> {
        let now = monotonic_ns();
        let mut cuts = 0;
        for c in self.snapshot(py)? {
            if HttpConn::check_timeout(c.bind(py).cast::<HttpConn>()?, now)? {
                cuts += 1;
                if cuts >= max_cuts {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Graceful shutdown, step one: every connection closes after its next response (which
    /// says `connection: close`); one idle for `idle_grace` seconds closes now, a more recent
    /// one when the sweep finds it idle that long (a client looping keep-alive requests sends
    /// its next one well within it, and a close would race with it). Returns the connections
    /// still open.
    #[pyo3(signature = (idle_grace = 0.0))]
    fn shutdown(&self, py: Python<'_>, idle_grace: f64) -> PyResult<usize> {
        if idle_grace.is_nan() || idle_grace < 0.0 {
            return Err(PyValueError::new_err(format!("idle_grace must be >= 0 seconds, got {idle_grace}")));
        }
        self.drain_idle.store((idle_grace * 1e9) as u64, Ordering::Relaxed);
        self.shutting_down.store(true, Ordering::Relaxed);
        for c in self.snapshot(py)? {
            HttpConn::begin_shutdown(c.bind(py).cast::<HttpConn>()?)?;
        }
        Ok(self.conns.borrow(py)?.len())
    }

    /// Graceful shutdown's deadline passed: close every connection now.
    fn abort_all(&self, py: Python<'_>) -> PyResult<()> {
        for c in self.snapshot(py)? {
            HttpConn::abort(c.bind(py).cast::<HttpConn>()?)?;
        }
        Ok(())
    }
}
