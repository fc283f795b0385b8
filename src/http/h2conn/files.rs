//! Static files (`--static-path-*`, `src/http/files`) over HTTP/2: the same hook before a
//! request goes to the application, and the answer sent on its stream.
//!
//! The body is read from the file a piece at a time and given to the core as the windows
//! allow (`respond::pump`): never `sendfile(2)`, whose bytes would bypass the framing and the
//! flow control (and TLS). A piece is at most `respond::PIECE` bytes; what the windows did
//! not take waits on the stream as any response body does, and the next piece is read only
//! once it went, so a slow client holds one piece of the file in memory, not the file.

use pyo3::prelude::*;

use super::{respond, H2Conn};
use crate::http::files::{Answer, Body, RequestView};
use crate::http::proto::h2::{Head, RequestHead};

/// What the mounts read of an HTTP/2 request head.
pub(super) struct H2View<'h>(pub(super) &'h Head);

impl RequestView for H2View<'_> {
    fn method(&self) -> &[u8] {
        RequestHead::method(&self.0)
    }
    fn path(&self) -> &[u8] {
        RequestHead::path(&self.0)
    }
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        RequestHead::header(&self.0, name)
    }
}

impl H2Conn {
    /// Answer stream `id` with a static file's `answer` (no application).
    pub(super) fn serve_static(slf: &Bound<'_, Self>, id: u32, answer: Answer) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Answer { status, fields, length, body } = answer;
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = fields.into_iter().map(|(n, v)| (n.to_vec(), v)).collect();
        if status != 304 {
            // On a HEAD's answer too: the length a GET would get.
            fields.push((b"content-length".to_vec(), length.to_string().into_bytes()));
        }
        respond::stamped(this, py, &mut fields)?;
        let file = match body {
            Body::File { file, offset, len } if len > 0 => Some((file, offset, len)),
            _ => None,
        };
        let end = file.is_none();
        {
            let mut st = this.st.borrow_mut(py)?;
            if st.core.respond(id, status, fields.iter().map(|(n, v)| (&n[..], &v[..])), end).is_err() {
                // The stream went meanwhile: its `Reset` forgets it.
                return Ok(());
            }
            if let Some(s) = st.streams.get_mut(&id) {
                s.status = status;
                s.started = true;
                s.sent = file.as_ref().map_or(0, |f| f.2);
                s.file = file;
            }
        }
        if end {
            respond::response_ended(slf, id)?;
        } else {
            respond::pump(slf, id)?;
        }
        Self::queue_flush(slf)
    }
}
