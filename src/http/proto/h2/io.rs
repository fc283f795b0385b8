//! The transport h2 reads and writes through: two in-memory buffers, not a socket.
//!
//! h2 owns its transport (it gives no way back to it), so the buffers sit in a `Pipe` shared
//! between `Io` (what h2 holds) and `Conn` (which feeds input and takes output). The core is
//! used from one thread, but `Conn` must be `Send` (the driver keeps it in a Python object), so
//! the share is `Arc<Mutex<_>>`; it is never contended, and taken a few times per poll.
//!
//! What the transport's answers mean to h2, and why they bound the work:
//! - A read returns what was fed and not yet read, and `Poll::Pending` once it is used up; h2
//!   then stops reading frames and the poll returns. So one `Conn::poll` processes at most the
//!   bytes fed since the last one (plus what waited): the work of a poll is bounded by its
//!   input, however much the peer sent. The waker of a pending read is not kept: `Conn` polls
//!   h2 again whenever it is fed.
//! - After `feed_eof`, once the input is used up, a read returns 0 bytes: h2 sees the peer's
//!   EOF, ends the streams still open, and closes.
//! - A write appends to the output what fits below `max_output` bytes untaken; when nothing
//!   fits it is `Pending`, and h2 stops reading frames too (it reads only when it can write),
//!   so a peer that never reads our answers (PINGs, SETTINGS ACKs) cannot make the output grow
//!   past `max_output` (plus h2's own write buffer, 16 KiB).
//! - While `reading` is off (`take_output` only encodes what is queued), reads are `Pending`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Both directions' bytes.
#[derive(Debug, Default)]
struct Buffers {
    /// Fed and not yet read from `pos` on; compacted when it is all read.
    input: Vec<u8>,
    pos: usize,
    eof: bool,
    reading: bool,
    output: Vec<u8>,
    max_output: usize,
    /// h2 shut the transport down (it closed the connection; the output is complete).
    shut_down: bool,
}

/// `Conn`'s handle on the buffers.
#[derive(Debug, Clone)]
pub(super) struct Pipe(Arc<Mutex<Buffers>>);

/// h2's handle on the same buffers.
#[derive(Debug)]
pub(super) struct Io(Pipe);

impl Pipe {
    /// A pipe and the transport to hand h2; writes wait once `max_output` bytes are untaken.
    pub(super) fn new(max_output: usize) -> (Pipe, Io) {
        let pipe = Pipe(Arc::new(Mutex::new(Buffers { max_output, reading: true, ..Buffers::default() })));
        (pipe.clone(), Io(pipe))
    }

    fn lock(&self) -> MutexGuard<'_, Buffers> {
        // A panic while the lock was held left plain byte buffers, which are still coherent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn feed(&mut self, data: &[u8]) {
        let mut b = self.lock();
        if b.eof {
            return;
        }
        if b.pos == b.input.len() {
            b.input.clear();
            b.pos = 0;
        } else if b.pos > b.input.len() / 2 {
            let pos = b.pos;
            b.input.drain(..pos);
            b.pos = 0;
        }
        b.input.extend_from_slice(data);
    }

    pub(super) fn feed_eof(&mut self) {
        self.lock().eof = true;
    }

    pub(super) fn eof(&self) -> bool {
        self.lock().eof
    }

    /// Bytes fed and not yet read by h2.
    pub(super) fn unread(&self) -> usize {
        let b = self.lock();
        b.input.len() - b.pos
    }

    pub(super) fn set_reading(&mut self, on: bool) {
        self.lock().reading = on;
    }

    /// Whether writes wait (the output is full).
    pub(super) fn output_full(&self) -> bool {
        let b = self.lock();
        b.output.len() >= b.max_output
    }

    pub(super) fn pending_output(&self) -> usize {
        self.lock().output.len()
    }

    /// Append the output to `out` (handing over the buffer itself when `out` is empty).
    pub(super) fn take_output(&mut self, out: &mut Vec<u8>) {
        let mut b = self.lock();
        if out.is_empty() {
            std::mem::swap(out, &mut b.output);
        } else {
            out.extend_from_slice(&b.output);
            b.output.clear();
        }
    }

    pub(super) fn shut_down(&self) -> bool {
        self.lock().shut_down
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut b = self.0.lock();
        if !b.reading {
            return Poll::Pending;
        }
        let pos = b.pos;
        let n = (b.input.len() - pos).min(buf.remaining());
        if n == 0 {
            // Nothing left: EOF if the peer closed (a ready read of 0 bytes), else wait for
            // the next feed (which polls h2 again; no waker needed).
            return if b.eof { Poll::Ready(Ok(())) } else { Poll::Pending };
        }
        buf.put_slice(&b.input[pos..pos + n]);
        b.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut b = self.0.lock();
        let room = b.max_output.saturating_sub(b.output.len());
        if room == 0 {
            // `take_output` polls h2 again once it emptied the output.
            return Poll::Pending;
        }
        let n = room.min(data.len());
        b.output.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.lock().shut_down = true;
        Poll::Ready(Ok(()))
    }
}
