//! What `ringloop serve --watch-threshold` reads of an HTTP/2 connection's requests: the
//! records `conn/watch.rs` keeps for HTTP/1.1 (read there, through `HttpConn`, by
//! `ServerState._recent_requests`), and one more kind for the streams in flight.
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
use pyo3::{PyTraverseError, PyVisit};

use super::H2Conn;
use crate::reactor::sys::monotonic_ns;

/// One request as the watch needs it: its subject (the ASGI scope, the native `Request`), its
/// stream id (the request's number on the connection) and when it began.
pub(crate) struct Recent {
    subject: Py<PyAny>,
    id: u64,
    begun: u64,
}

impl Recent {
    fn clone_ref(&self, py: Python<'_>) -> Recent {
        Recent { subject: self.subject.clone_ref(py), id: self.id, begun: self.begun }
    }
}

#[derive(Default)]
pub(crate) struct Records {
    latest: Option<Recent>,
    hosted: Option<Recent>,
    spawned: Option<(Py<PyAny>, Recent)>,
}

impl Records {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for r in [&self.latest, &self.hosted].into_iter().flatten() {
            visit.call(&r.subject)?;
        }
        if let Some((task, r)) = &self.spawned {
            visit.call(task)?;
            visit.call(&r.subject)?;
        }
        Ok(())
    }
}

/// One record: `(kind, task, subject, request number, begun ns)` (`conn/watch.rs` adds the
/// connection's id and client).
pub(crate) type Row = (&'static str, Option<Py<PyAny>>, Py<PyAny>, u64, u64);

impl H2Conn {
    fn tracking(&self) -> bool {
        self.server.get().track_requests.load(Ordering::Relaxed)
    }

    /// Stream `id`'s application starts with `subject`.
    pub(super) fn note_start(&self, py: Python<'_>, id: u64, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.tracking() {
            return Ok(());
        }
        let recent = Recent { subject: subject.clone().unbind(), id, begun: monotonic_ns() };
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            if let Some(s) = st.streams.get_mut(&(id as u32)) {
                s.subject = Some(subject.clone().unbind());
            }
            st.watch.latest.replace(recent)
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
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            let latest = st.watch.latest.as_ref().map(|r| r.clone_ref(py));
            std::mem::replace(&mut st.watch.hosted, latest)
        };
        drop(old);
        Ok(())
    }

    /// `task`, a task of its own, runs the latest stream.
    pub(super) fn note_spawned(&self, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.tracking() {
            return Ok(());
        }
        let old = {
            let mut st = self.st.borrow_mut(py)?;
            let latest = st.watch.latest.as_ref().map(|r| (task.clone().unbind(), r.clone_ref(py)));
            std::mem::replace(&mut st.watch.spawned, latest)
        };
        drop(old);
        Ok(())
    }

    /// The connection's records (see the module docs), the host task filled in, and its
    /// client.
    pub(crate) fn watch_rows(&self, py: Python<'_>) -> PyResult<(Vec<Row>, Py<PyAny>)> {
        let (mut rows, host, client) = {
            let st = self.st.borrow(py)?;
            let w = &st.watch;
            let mut rows: Vec<Row> = Vec::new();
            let mut push = |kind, task, r: &Recent| rows.push((kind, task, r.subject.clone_ref(py), r.id, r.begun));
            if let Some(r) = &w.latest {
                push("latest", None, r);
            }
            if let Some(r) = &w.hosted {
                push("hosted", None, r);
            }
            if let Some((t, r)) = &w.spawned {
                push("spawned", Some(t.clone_ref(py)), r);
            }
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
        for row in rows.iter_mut().filter(|r| r.0 == "hosted") {
            row.1 = host_task.as_ref().map(|t| t.clone_ref(py));
        }
        Ok((rows, client))
    }
}
