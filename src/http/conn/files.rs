//! The connection's half of static files (`src/http/files`): the one hook before a request
//! goes to the application (`static_answer`), and the writing of the answer through `h1` and
//! the connection's output path.
//!
//! How the body leaves:
//! - up to `INLINE_MAX` bytes are read into `out` behind the head: one `pread`, and the
//!   response leaves with the connection's usual single write (over TLS too);
//! - more, on a cleartext native transport whose buffer is empty: `sendfile(2)` straight to
//!   the socket, at once, for as much as the socket takes (on loopback and on a warm
//!   connection that is usually all of it);
//! - what is left (the socket was full, the transport's buffer was not empty, or TLS):
//!   `ringloop.server.files.send_rest`, a task running `loop.sendfile`, which waits for the
//!   socket (native transport) or reads and writes through the TLS transport; the response
//!   ends when it returns (`_static_done`). Until then `h1` holds the next request back.

use pyo3::intern;
use pyo3::prelude::*;
use std::os::fd::IntoRawFd;

use super::super::files::{Answer, Body, RequestView};
use super::super::proto::h1::{After, Head, Stamp};
use super::super::server::ServerState;
use super::HttpConn;
use crate::reactor::sys::monotonic_ns;
use crate::transport::stream::StreamIO;

/// Bodies up to this size are copied into `out` (one read, one write of head and body
/// together) rather than sent with `sendfile`: below it the extra syscall costs more than the
/// copy (the same bound as the transport's `COALESCE_BELOW` order of magnitude).
const INLINE_MAX: u64 = 64 * 1024;

/// A static answer and what its access-log line needs.
pub(super) struct StaticStep {
    answer: Answer,
    log: Option<LogLine>,
}

pub(super) struct LogLine {
    method: String,
    path: String,
    query: Vec<u8>,
    version: &'static str,
    begun: u64,
}

struct H1View<'h>(&'h Head<'h>);

impl RequestView for H1View<'_> {
    fn method(&self) -> &[u8] {
        self.0.method()
    }
    fn path(&self) -> &[u8] {
        self.0.path()
    }
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.0.headers().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }
}

/// The hook: a static answer for this head, or `None` (the application's request).
pub(super) fn static_answer(server: &ServerState, head: &Head<'_>) -> Option<Box<StaticStep>> {
    let mounts = server.files.get()?;
    let answer = mounts.answer(&H1View(head))?;
    let log = server.access_log.as_ref().map(|_| LogLine {
        method: String::from_utf8_lossy(head.method()).into_owned(),
        path: String::from_utf8_lossy(head.path()).into_owned(),
        query: head.query().to_vec(),
        version: head.version().as_str(),
        begun: monotonic_ns(),
    });
    Some(Box::new(StaticStep { answer, log }))
}

/// How the body of a static answer goes on after its head.
enum Rest {
    /// The response is complete in `out`.
    Done(After),
    /// Large: sendfile or the Python fallback.
    Large { file: std::fs::File, offset: u64, len: u64 },
}

impl HttpConn {
    /// Write a static answer. `Ok(true)`: complete, go on with the next request.
    pub(super) fn serve_static(slf: &Bound<'_, Self>, step: StaticStep) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let StaticStep { answer, log } = step;
        let status = answer.status;
        let sent = match &answer.body {
            Body::File { len, .. } => *len,
            Body::Empty => 0,
        };
        let rest = this.with_stamp(py, |st, stamp| -> Result<Rest, String> {
            let mut r = st.h1.response(&mut st.out, answer.status).map_err(|e| e.to_string())?;
            for (n, v) in &answer.fields {
                r.header(n, v).map_err(|e| e.to_string())?;
            }
            for (n, v) in &server.default_headers {
                if !answer.fields.iter().any(|(f, _)| f.eq_ignore_ascii_case(n)) {
                    r.header(n, v).map_err(|e| e.to_string())?;
                }
            }
            r.end(Some(answer.length), stamp).map_err(|e| e.to_string())?;
            let Body::File { file, offset, len } = answer.body else {
                return st.h1.end_response(&mut st.out).map(Rest::Done).map_err(|e| e.to_string());
            };
            if st.h1.frame_body(&mut st.out, len as usize).map_err(|e| e.to_string())?.is_none() {
                return st.h1.end_response(&mut st.out).map(Rest::Done).map_err(|e| e.to_string());
            }
            if len <= INLINE_MAX {
                // The file shrank under us: the head promised `len`, only closing can tell.
                super::super::files::fsio::read_into(&file, offset, len, &mut st.out).map_err(|e| format!("reading a static file: {e}"))?;
                return st.h1.end_response(&mut st.out).map(Rest::Done).map_err(|e| e.to_string());
            }
            Ok(Rest::Large { file, offset, len })
        })?;
        let after = match rest {
            Err(rule) => {
                {
                    // A head that failed left nothing in `out` and gets a 500; a body that
                    // failed after its head cannot be finished: `h1` closes either way.
                    let mut st = this.st.borrow_mut(py)?;
                    let st = &mut *st;
                    st.h1.write_error(&mut st.out, 500, &Stamp { date: None, server: None });
                }
                Self::reject_logged(slf, &rule)?;
                return Ok(false);
            }
            Ok(Rest::Done(after)) => after,
            Ok(Rest::Large { file, mut offset, mut len }) => {
                if !Self::send_now(slf, &file, &mut offset, &mut len)? {
                    {
                        let mut st = this.st.borrow_mut(py)?;
                        st.static_sending = true;
                        st.static_log = log.map(|l| Box::new((l, status, sent)));
                    }
                    Self::send_later(slf, file, offset, len)?;
                    return Ok(false);
                }
                let mut st = this.st.borrow_mut(py)?;
                let st = &mut *st;
                st.h1.end_response(&mut st.out).unwrap_or(After::Close)
            }
        };
        Self::static_ended(slf, after, log.map(|l| Box::new((l, status, sent))))?;
        Ok(matches!(after, After::KeepAlive))
    }

    /// Cleartext and nothing queued before it: `sendfile` now. `Ok(true)`: all of it went.
    fn send_now(slf: &Bound<'_, Self>, file: &std::fs::File, offset: &mut u64, len: &mut u64) -> PyResult<bool> {
        let py = slf.py();
        Self::flush(slf)?;
        let Some(io) = slf.get().st.borrow(py)?.io.as_ref().map(|i| i.clone_ref(py)) else { return Ok(false) };
        // Under the native TLS layer the file must be read and encrypted, never sendfile'd in
        // the clear: `send_later`'s `loop.sendfile` goes through the transport, which does that.
        if io.get().tls_on(py)? {
            return Ok(false);
        }
        if !StreamIO::buffer_empty(io.bind(py))? {
            StreamIO::flush(io.bind(py))?;
            if !StreamIO::buffer_empty(io.bind(py))? {
                return Ok(false);
            }
        }
        match super::super::files::fsio::send_file(io.get().fd(), file, offset, len) {
            Ok(done) => Ok(done),
            // The connection failed (reset) or the file shrank: the fallback meets the same
            // error and closes the connection.
            Err(_) => Ok(false),
        }
    }

    /// The rest of a large body through `ringloop.server.files.send_rest` (see the module docs).
    fn send_later(slf: &Bound<'_, Self>, file: std::fs::File, offset: u64, len: u64) -> PyResult<()> {
        let py = slf.py();
        Self::flush(slf)?;
        let helper = py.import(intern!(py, "ringloop.server.files"))?.getattr(intern!(py, "send_rest"))?;
        let coro = helper.call1((slf, file.into_raw_fd(), offset, len))?;
        Self::spawn_task(slf, &coro).map(|_| ())
    }

    /// A static response ended with `after`: the access log, the request count, what next.
    fn static_ended(slf: &Bound<'_, Self>, after: After, log: Option<Box<(LogLine, u16, u64)>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        if let (Some(hook), Some(line)) = (&server.access_log, log) {
            let (l, status, sent) = *line;
            let client = this.st.borrow(py)?.client.clone_ref(py);
            let seconds = monotonic_ns().saturating_sub(l.begun) as f64 / 1e9;
            let query = pyo3::types::PyBytes::new(py, &l.query);
            hook.call1(py, (client, l.method, l.path, query, l.version, status, sent, seconds))?;
        }
        if server.count_request() {
            this.st.borrow_mut(py)?.h1.set_close();
            if let Some(cb) = &server.on_max_requests {
                cb.call0(py)?;
            }
        }
        let in_process = this.st.borrow(py)?.in_process;
        match after {
            After::KeepAlive if server.shutting_down.load(std::sync::atomic::Ordering::Relaxed) => Self::close_when_flushed(slf)?,
            After::KeepAlive if !in_process => Self::schedule_continue(slf)?,
            After::KeepAlive => {}
            After::Close | After::Upgrade => Self::close_when_flushed(slf)?,
        }
        if !in_process {
            Self::queue_flush(slf)?;
        }
        Ok(())
    }

    /// A response that cannot be completed: logged at debug level, the connection closed.
    fn reject_logged(slf: &Bound<'_, Self>, rule: &str) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if let Some(debug) = &this.server.get().log_debug {
            let client = this.st.borrow(py)?.client.clone_ref(py);
            debug.call1(py, (format!("static file response failed: {rule}"), client))?;
        }
        Self::close_when_flushed(slf)
    }
}

#[pymethods]
impl HttpConn {
    /// `send_rest` finished the body (`ok`), or failed (the connection closes).
    fn _static_done(slf: &Bound<'_, Self>, ok: bool) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let log = {
            let mut st = this.st.borrow_mut(py)?;
            st.static_sending = false;
            st.static_log.take()
        };
        if !ok || this.is_lost(py)? {
            return Self::close_when_flushed(slf);
        }
        let after = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            st.h1.end_response(&mut st.out).unwrap_or(After::Close)
        };
        Self::static_ended(slf, after, log)
    }

    /// The asyncio transport for `send_rest`'s `loop.sendfile`, or `None` once it is gone.
    fn _static_transport(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.transport(py)
    }
}
