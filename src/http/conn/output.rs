//! The way out of a connection: response bytes gathered in `out` and written with one send
//! (at the end of `process`, or at the end of the loop iteration for responses a task
//! finished), large bodies written from the application's own `bytes`, and the write side's
//! back-pressure (`write_blocked`, `drained`); response heads written under the date stamp
//! (`write_stamped`).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::cycle;
use super::{ConnState, HttpConn};
use super::super::proto::h1::{EncodeError, Stamp, CONTINUE};
use crate::eventloop::core::LoopCore;
use crate::transport::stream::StreamIO;

impl HttpConn {
    /// The stamp (`date`, `server`) for a response written now, given to `f` with the state.
    pub(crate) fn with_stamp<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ConnState, &Stamp<'_>) -> R) -> PyResult<R> {
        let server = self.server.get();
        server.with_date(py, |date| -> PyResult<R> {
            let mut st = self.st.borrow_mut(py)?;
            Ok(f(&mut st, &Stamp { date, server: server.server_header.as_deref() }))
        })?
    }

    /// Write a response head (or a whole answer) under the stamp: the one way a head is
    /// written for a request (`cycle::write_head`, the WebSocket 101 and its refusals). A field
    /// the application gave that HTTP/1.1 cannot carry becomes its `ValueError`.
    pub(crate) fn write_stamped<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ConnState, &Stamp<'_>) -> Result<R, EncodeError>) -> PyResult<R> {
        self.with_stamp(py, f)?.map_err(|e| PyValueError::new_err(format!("invalid response: {} ({})", e, e.rule())))
    }

    /// `100 Continue` before the first body read, if the client waits for it.
    pub(crate) fn push_continue(st: &mut ConnState) {
        st.out.extend_from_slice(CONTINUE);
    }

    /// Write `out` at the end of this loop iteration (responses finished by tasks).
    pub(crate) fn queue_flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            if st.flush_queued || st.in_process || (st.out.is_empty() && !st.close_after && cycle::head_due(&st).is_none()) {
                return Ok(());
            }
            st.flush_queued = true;
        }
        LoopCore::queue_flush(slf.get().loop_(py).cast::<LoopCore>()?, slf.clone().unbind())
    }

    /// Write `out` now, with the head of a response that started and waits (`head_due`);
    /// then close if that was asked.
    pub(crate) fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let due = {
            let st = this.st.borrow(py)?;
            if st.lost || st.lingering || st.close_after {
                None
            } else {
                cycle::head_due(&st)
            }
        };
        if let Some(id) = due {
            // Framed without knowing the body (chunked, unless the application set
            // content-length). Invalid fields fail the application's next `send` instead.
            let _ = cycle::write_head(slf, id, None);
        }
        let (mut out, io, transport, close) = {
            let mut st = this.st.borrow_mut(py)?;
            st.flush_queued = false;
            if st.lost {
                st.out.clear();
                return Ok(());
            }
            if st.lingering {
                return Ok(());
            }
            (std::mem::take(&mut st.out), st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)), st.close_after)
        };
        if !out.is_empty() {
            StreamIO::write_to(py, io.as_ref(), transport.as_ref(), &out)?;
            out.clear();
        }
        {
            // Keep the vector's capacity for the next response.
            let mut st = this.st.borrow_mut(py)?;
            if st.out.is_empty() {
                st.out = out;
            }
        }
        if close {
            if let Some(t) = transport {
                if this.st.borrow(py)?.linger_after {
                    return Self::start_lingering(slf, t.bind(py));
                }
                t.call_method0(py, intern!(py, "close"))?;
            }
        }
        Ok(())
    }

    /// Write a body the application owns: framed by `h1`, sent from its own `bytes` after what
    /// `out` holds.
    pub(crate) fn write_large_body(slf: &Bound<'_, Self>, body: &Bound<'_, PyBytes>, after: &[u8]) -> PyResult<()> {
        let py = slf.py();
        Self::flush(slf)?;
        let (io, transport) = {
            let st = slf.get().st.borrow(py)?;
            (st.io.as_ref().map(|i| i.clone_ref(py)), st.transport.as_ref().map(|t| t.clone_ref(py)))
        };
        match (io, transport) {
            (Some(io), _) => StreamIO::write_bytes(io.bind(py), body)?,
            (None, Some(t)) => {
                t.call_method1(py, intern!(py, "write"), (body,))?;
            }
            (None, None) => {}
        }
        slf.get().st.borrow_mut(py)?.out.extend_from_slice(after);
        Ok(())
    }

    /// Close once everything written so far is out (asyncio's `close` flushes first).
    pub(crate) fn close_when_flushed(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let in_process = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.close_after = true;
            st.in_process
        };
        if in_process {
            return Ok(()); // `run` flushes, and closes, when it returns
        }
        Self::queue_flush(slf)
    }

    /// After an error answer: once it is written, half-close and read (and drop) what the
    /// client still sends until its EOF or `LINGER_NS`, then close (see `lingering`). A TLS
    /// connection, which cannot half-close, just closes.
    pub(crate) fn linger_when_flushed(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.get().st.borrow_mut(slf.py())?.linger_after = true;
        Self::close_when_flushed(slf)
    }

    /// Half-close now and start lingering, or close if the transport cannot half-close.
    fn start_lingering(slf: &Bound<'_, Self>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        if !transport.call_method0(intern!(py, "can_write_eof"))?.is_truthy()? {
            transport.call_method0(intern!(py, "close"))?;
            return Ok(());
        }
        transport.call_method0(intern!(py, "write_eof"))?;
        {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.lingering = true;
            st.since = crate::reactor::sys::monotonic_ns();
        }
        Self::update_reading(slf)
    }

    /// Whether a `send` should wait for the transport's buffer to drain.
    pub(crate) fn write_blocked(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.write_paused)
    }

    /// A future resolved once the transport's buffer drained below its low-water mark.
    pub(crate) fn drained(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let fut = slf.get().loop_(py).call_method0(intern!(py, "create_future"))?.unbind();
        slf.get().st.borrow_mut(py)?.drain_waiters.push(fut.clone_ref(py));
        Ok(fut)
    }
}
