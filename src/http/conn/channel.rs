//! The connection as a WebSocket session's channel: `websocket::Channel` for `HttpConn`
//! (HTTP/1.1: one session per connection, in `ConnState::ws`, its frames in `out`; after the
//! `101` the connection carries nothing else).

use pyo3::prelude::*;

use super::cycle::{self, current, Cycle};
use super::sink::{http, H1Sink};
use super::HttpConn;
use crate::http::websocket::{Channel, Parts, WsState};
use crate::reactor::sys::monotonic_ns;

impl Channel for H1Sink {
    fn parts(&self, conn: &Bound<'_, PyAny>, _id: u64, f: &mut dyn FnMut(Parts<'_>)) -> PyResult<()> {
        let mut st = http(conn).get().st.borrow_mut(conn.py())?;
        let st = &mut *st;
        f(Parts { ws: &mut st.ws, out: &mut st.out, lost: st.lost, write_paused: st.write_paused, closing: st.close_after, since: st.since });
        Ok(())
    }

    fn begin(&self, conn: &Bound<'_, PyAny>, id: u64, session: Box<WsState>) -> PyResult<()> {
        let mut st = http(conn).get().st.borrow_mut(conn.py())?;
        if let Some(c) = current(&mut st, id) {
            // Its waiting `receive` is the session's to answer (`cycle::answer_receiver`).
            c.websocket = true;
        }
        st.ws = Some(session);
        Ok(())
    }

    fn switch(&self, conn: &Bound<'_, PyAny>, id: u64, fields: &[(&[u8], &[u8])]) -> PyResult<Option<Vec<u8>>> {
        let conn = http(conn);
        conn.get().write_stamped(conn.py(), |st, stamp| {
            let st = &mut *st;
            if current(st, id).is_none() {
                return Ok(None);
            }
            let mut r = st.h1.response(&mut st.out, 101)?;
            for (n, v) in fields {
                r.header(n, v)?;
            }
            r.end(None, stamp)?;
            st.h1.end_response(&mut st.out)?;
            if let Some(c) = current(st, id) {
                (c.start_seen, c.started, c.status) = (true, true, 101);
            }
            st.since = monotonic_ns();
            Ok(Some(st.h1.take_upgraded()))
        })
    }

    fn accepted(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let py = conn.py();
        let this = http(conn).get();
        let server = this.server.get();
        if let Some(log) = &server.access_log {
            let entry = {
                let mut st = this.st.borrow_mut(py)?;
                current(&mut st, id).map(|c: &mut Cycle| {
                    let seconds = monotonic_ns().saturating_sub(c.begun) as f64 / 1e9;
                    (c.method.clone_ref(py), c.path.clone_ref(py), c.query.clone_ref(py), c.version.clone_ref(py), seconds)
                })
            };
            if let Some((method, path, query, version, seconds)) = entry {
                let client = this.st.borrow(py)?.client.clone_ref(py);
                log.call1(py, (client, method, path, query, version, 101, 0, seconds))?;
            }
        }
        if server.count_request() {
            if let Some(cb) = &server.on_max_requests {
                cb.call0(py)?;
            }
        }
        Ok(())
    }

    fn release(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let py = conn.py();
        let c = {
            let mut st = http(conn).get().st.borrow_mut(py)?;
            if current(&mut st, id).is_none() {
                return Ok(());
            }
            st.cycle.take()
        };
        match c {
            Some(c) => cycle::cycle_over(py, c),
            None => Ok(()),
        }
    }

    fn flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        HttpConn::flush(http(conn))
    }

    fn queue_flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        HttpConn::queue_flush(http(conn))
    }

    fn close(&self, conn: &Bound<'_, PyAny>, _id: u64) -> PyResult<()> {
        HttpConn::close_when_flushed(http(conn))
    }

    fn update_reading(&self, conn: &Bound<'_, PyAny>, _id: u64) -> PyResult<()> {
        HttpConn::update_reading(http(conn))
    }
}
