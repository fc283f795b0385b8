//! What `ringloop serve --watch-threshold` reads about requests when the loop was blocked:
//! each connection's most recent request, kept only while the server tracks them.
//!
//! Why at report time and not per request: a block is rare, a request is not. With tracking
//! on, starting a request costs one reference kept (the ASGI scope or the native `Request`,
//! which the request had anyway) and two integers; nothing is formatted, no id is made, no
//! Python is called. With tracking off (the default) it costs one relaxed atomic load. When
//! the watch reports a block, the Python half (`ringloop.server.watching`) asks
//! `ServerState._recent_requests()` for every connection's record and picks the request that
//! owned the slice: by the blocked task (a connection's host task, `host.rs`), or, for a
//! block inside a request's first step (run inline by the connection's read callback, where
//! no task is current), by the request that began inside the blocked slice.
//!
//! The record outlives its response on purpose: a handler that blocks and then answers
//! without awaiting has finished before the slice ends, so its cycle (`cycle.rs`) is gone by
//! the time the report is built. It is replaced by the connection's next request, and goes
//! with the connection.

use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use super::conn::HttpConn;
use super::server::ServerState;
use crate::reactor::sys::monotonic_ns;

/// A connection's most recent request, as the watch needs it.
pub(crate) struct Recent {
    /// The ASGI scope (after the application has run: routers add `route`, `endpoint`), or
    /// the native `Request`.
    subject: Py<PyAny>,
    /// The connection's count of the request (1 for its first): with the connection's id,
    /// a request id unique in the worker.
    cycle: u64,
    /// When the request began (CLOCK_MONOTONIC ns).
    begun: u64,
}

impl Recent {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.subject)
    }
}

/// A request starts on `conn`: remember it if the server tracks requests (see the module docs).
#[inline]
pub(crate) fn note_start(conn: &HttpConn, py: Python<'_>, cycle: u64, subject: &Bound<'_, PyAny>) -> PyResult<()> {
    if !conn.server.get().track_requests.load(Ordering::Relaxed) {
        return Ok(());
    }
    let recent = Recent { subject: subject.clone().unbind(), cycle, begun: monotonic_ns() };
    // The previous record is dropped after the borrow ends: dropping a scope may run finalizers.
    let old = conn.st.borrow_mut(py)?.recent.replace(recent);
    drop(old);
    Ok(())
}

/// One connection's record: `(conn_id, host_task, subject, cycle, begun_ns, client, busy)`;
/// `busy` says the request's response has not ended yet.
type Row = (u64, Option<Py<PyAny>>, Py<PyAny>, u64, u64, Py<PyAny>, bool);

#[pymethods]
impl ServerState {
    /// Keep each connection's most recent request for the watch (`--watch-threshold`).
    fn _track_requests(&self, on: bool) {
        self.track_requests.store(on, Ordering::Relaxed);
    }

    /// Whether requests are tracked.
    #[getter]
    fn tracking_requests(&self) -> bool {
        self.track_requests.load(Ordering::Relaxed)
    }

    /// Every open connection's most recent request (see the module docs): a list of
    /// `(conn_id, host_task or None, scope_or_request, cycle, begun_ns, client, busy)`.
    /// Called when a block is reported, never per request.
    fn _recent_requests(&self, py: Python<'_>) -> PyResult<Vec<Row>> {
        let conns: Vec<(u64, Py<HttpConn>)> = self.conns.borrow(py)?.iter().map(|(id, c)| (*id, c.clone_ref(py))).collect();
        let mut rows = Vec::new();
        for (id, conn) in conns {
            let (host, row) = {
                let st = conn.get().st.borrow(py)?;
                let Some(r) = st.recent.as_ref() else { continue };
                let busy = st.cycle.as_ref().is_some_and(|c| c.id == r.cycle);
                let host = st.host.as_ref().map(|h| h.clone_ref(py));
                (host, (r.subject.clone_ref(py), r.cycle, r.begun, st.client.clone_ref(py), busy))
            };
            let task = match host {
                Some(h) => h.get().current_task(py)?,
                None => None,
            };
            let (subject, cycle, begun, client, busy) = row;
            rows.push((id, task, subject, cycle, begun, client, busy));
        }
        Ok(rows)
    }
}
