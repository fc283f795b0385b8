//! What `ringloop serve --watch-threshold` reads about requests when the loop was blocked:
//! which request each connection started last, and which requests its tasks run, kept only
//! while the server tracks them.
//!
//! Why at report time and not per request: a block is rare, a request is not. With tracking
//! on, starting a request costs two references kept (the ASGI scope or the native `Request`,
//! which the request had anyway) and a clock read; nothing is formatted, no id is made, no
//! Python is called. With tracking off (the default) it costs one relaxed atomic load. When
//! the watch reports a block, the Python half (`ringloop.server.watching`) asks
//! `ServerState._recent_requests()` for every connection's records and picks the request that
//! owned the slice:
//!
//! - a block in a task step: the request the blocked task runs — the connection's host task
//!   (`host.rs`) runs its `hosted` request, a task of the request's own (made while the host
//!   task still ran an earlier request's background work) its `spawned` one;
//! - a block in a request's first step, which the connection's read callback runs inline
//!   (no task is current then): the `latest` request, if it began inside the blocked slice.
//!
//! The records outlive their responses on purpose: a handler that blocks and then answers, or
//! background work that blocks and then returns, has finished before the slice ends, so its
//! cycle (`cycle.rs`) and its coroutine's frames are gone by the time the report is built.
//! Each record is replaced by the connection's next request of its kind, and goes with the
//! connection: an idle keep-alive connection holds its last scope until then. The records
//! themselves are both drivers' (`stream/records.rs`); this file notes HTTP/1.1's and serves
//! every connection's to the watch.

use std::sync::atomic::Ordering;

use pyo3::prelude::*;

use super::HttpConn;
use crate::http::server::ServerState;
use crate::http::stream::records;

fn tracking(conn: &HttpConn) -> bool {
    conn.server.get().track_requests.load(Ordering::Relaxed)
}

/// A request starts on `conn` (see the module docs).
#[inline]
pub(crate) fn note_start(conn: &HttpConn, py: Python<'_>, cycle: u64, subject: &Bound<'_, PyAny>) -> PyResult<()> {
    if !tracking(conn) {
        return Ok(());
    }
    // The previous record is dropped after the borrow ends: dropping a scope may run finalizers.
    let old = conn.st.borrow_mut(py)?.watch.started(subject, cycle);
    drop(old);
    Ok(())
}

/// The connection's host task runs the latest request.
#[inline]
pub(crate) fn note_hosted(conn: &HttpConn, py: Python<'_>) -> PyResult<()> {
    if !tracking(conn) {
        return Ok(());
    }
    let old = conn.st.borrow_mut(py)?.watch.hosted(py);
    drop(old);
    Ok(())
}

/// `task`, a task of its own, runs the latest request.
pub(crate) fn note_spawned(conn: &HttpConn, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    if !tracking(conn) {
        return Ok(());
    }
    let old = conn.st.borrow_mut(py)?.watch.spawned(py, task);
    drop(old);
    Ok(())
}

/// One record: `(conn_id, kind, task, subject, cycle, begun_ns, client)`, `kind` one of
/// `"latest"` (task `None`), `"hosted"` (the host task) and `"spawned"`; an HTTP/2
/// connection's also `"stream"` (task `None`) for each stream in flight, `cycle` its stream id
/// (`h2conn/watch.rs`).
type Row = (u64, &'static str, Option<Py<PyAny>>, Py<PyAny>, u64, u64, Py<PyAny>);

#[pymethods]
impl ServerState {
    /// Keep each connection's requests for the watch (`--watch-threshold`).
    fn _track_requests(&self, on: bool) {
        self.track_requests.store(on, Ordering::Relaxed);
    }

    /// Whether requests are tracked.
    #[getter]
    fn tracking_requests(&self) -> bool {
        self.track_requests.load(Ordering::Relaxed)
    }

    /// Every open connection's records (see the module docs and `Row`). Called when a block
    /// is reported, never per request.
    fn _recent_requests(&self, py: Python<'_>) -> PyResult<Vec<Row>> {
        let conns: Vec<(u64, Py<PyAny>)> = self.conns.borrow(py)?.iter().map(|(id, c)| (*id, c.clone_ref(py))).collect();
        let mut rows = Vec::new();
        for (id, conn) in conns {
            let http = conn.bind(py).cast::<HttpConn>()?;
            if let Some(h2) = http.get().h2(py)? {
                // An HTTP/2 connection keeps its own (`h2conn/watch.rs`), the host task in.
                let (records, client) = h2.get().watch_rows(py)?;
                for (kind, task, subject, cycle, begun) in records {
                    rows.push((id, kind, task, subject, cycle, begun, client.clone_ref(py)));
                }
                continue;
            }
            let (host, mut records, client) = {
                let st = http.get().st.borrow(py)?;
                (st.host.as_ref().map(|h| h.clone_ref(py)), st.watch.rows(py), st.client.clone_ref(py))
            };
            let host_task = match host {
                Some(h) => h.get().current_task(py)?,
                None => None,
            };
            records::with_host_task(py, &mut records, host_task.as_ref());
            for (kind, task, subject, cycle, begun) in records {
                rows.push((id, kind, task, subject, cycle, begun, client.clone_ref(py)));
            }
        }
        Ok(rows)
    }
}
