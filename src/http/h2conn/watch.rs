//! What `ringloop serve --watch-threshold` reads of an HTTP/2 connection's requests: the
//! records both drivers keep (`stream/records.rs`; read, through `HttpConn`, by
//! `ServerState._recent_requests` in `conn/watch.rs`), and one more kind for the streams in
//! flight.
//!
//! - `latest`: the stream whose application started last (a block in a first step, run
//!   inline by the read callback, is charged to the request that began inside the slice);
//! - `hosted`: the one the connection's host task runs; `spawned`: the latest task of a
//!   stream's own (made while the host task ran another stream's coroutine);
//! - `stream`: every stream in flight, with no task: many streams run in tasks of their own
//!   at once here, where h1 has at most one, so a block in an older one's task is found the
//!   way `watching.py` finds any (its coroutine's frames hold its scope), against these.
//!
//! As for h1, nothing is kept unless the server tracks requests (one relaxed load a stream
//! otherwise), and the records outlive their responses (a handler that blocks and then
//! answers is over by the time the report is built).

use std::sync::atomic::Ordering;

use pyo3::prelude::*;

use super::H2Conn;
use crate::http::stream::records::{self, Row};

impl H2Conn {
    fn tracking(&self) -> bool {
        self.server.get().track_requests.load(Ordering::Relaxed)
    }

    /// Stream `id`'s application starts with `subject`.
    pub(super) fn note_start(&self, py: Python<'_>, id: u64, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.tracking() {
            return Ok(());
        }
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            if let Some(s) = st.streams.get_mut(&(id as u32)) {
                s.subject = Some(subject.clone().unbind());
            }
            st.watch.started(subject, id)
        };
        // Dropped after the borrow: dropping a scope may run finalizers.
        drop(old);
        Ok(())
    }

    /// The host task runs the latest stream.
    pub(super) fn note_hosted(&self, py: Python<'_>) -> PyResult<()> {
        if !self.tracking() {
            return Ok(());
        }
        let old = self.st.borrow_mut(py)?.watch.hosted(py);
        drop(old);
        Ok(())
    }

    /// `task`, a task of its own, runs the latest stream.
    pub(super) fn note_spawned(&self, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.tracking() {
            return Ok(());
        }
        let old = self.st.borrow_mut(py)?.watch.spawned(py, task);
        drop(old);
        Ok(())
    }

    /// The connection's records (see the module docs), the host task filled in, and its
    /// client.
    pub(crate) fn watch_rows(&self, py: Python<'_>) -> PyResult<(Vec<Row>, Py<PyAny>)> {
        let (mut rows, host, client) = {
            let st = self.st.borrow(py)?;
            let mut rows = st.watch.rows(py);
            for (&id, s) in &st.streams {
                if let Some(subject) = &s.subject {
                    rows.push(("stream", None, subject.clone_ref(py), id as u64, s.begun));
                }
            }
            (rows, st.host.as_ref().map(|h| h.clone_ref(py)), st.client.clone_ref(py))
        };
        let host_task = match host {
            Some(h) => h.get().current_task(py)?,
            None => None,
        };
        records::with_host_task(py, &mut rows, host_task.as_ref());
        Ok((rows, client))
    }
}
