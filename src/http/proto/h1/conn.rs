//! The HTTP/1.1 server connection as a state machine: bytes in, events out; response heads
//! in, bytes out. No I/O (this is h1's connection, not the socket's).
//!
//! Two halves, as in h11: what we read (`Reading`) and what we write (`Writing`).
//! ```text
//!   reading:  Head ──head──▶ Body(decoder) ──end──▶ Done ─┐
//!   writing:  Waiting ─────response()────▶ Body(encoder) ─┴─end_response──▶ next cycle | Closed | Upgraded
//! ```
//! Invariants (each method keeps them; the tests and the fuzz targets check them):
//! 1. A head is parsed only in `Reading::Head`, which holds only between requests: the previous
//!    response was ended. So pipelined requests wait in the buffer, and responses leave in
//!    request order; `poll` says `Paused` while a request is read and its response is not done.
//! 2. `Writing::Waiting` ⇔ no byte of the current response has been produced. Only then may the
//!    server answer an error (`write_error`) or send `100 Continue`.
//! 3. The current head's bytes stay in the receive buffer, unmoved relative to each other, from
//!    `Event::Head` until the response ends: `head()` reads them in place, with no copy.
//!    Compaction moves the head to the front and the unconsumed bytes right after it.
//! 4. After an `Error`, nothing more is read: `poll` repeats the error; the connection closes
//!    (after `write_error`, if the response had not started). Never a second interpretation.
//! 5. The body is only decoded when the caller polls: bytes the application does not consume
//!    stay in the buffer, `wants_read()` turns false at `Limits::max_buffered`, and the I/O
//!    layer stops reading the socket — back-pressure without any buffer of ours growing.
//! 6. Once `Upgraded`, the bytes after the request belong to the new protocol
//!    (`take_upgraded`); once `Closed`, input is ignored.
//!
//! Keep-alive: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`;
//! and never after an error, a close-delimited body, the application's `connection: close`, or
//! the server's `set_close()`. When a response ends before its request body was read, the rest
//! of the body is read and dropped if it is small (`Limits::max_drain`), else the connection is
//! closed — and when the client is still waiting for `100 Continue`, it may never send that
//! body, so the response says `connection: close` (RFC 9110 §10.1.1).

use std::ops::Range;

use super::date::Stamp;
use super::decode::{Decoder, Step};
use super::encode::{canned, Answering, Encoder, HeadWriter};
use super::error::{EncodeError, Error};
use super::head::{self, Framing, Head, Meta, Method, Version};
use super::scan::Scan;
use super::Limits;

/// What `poll` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A request head: start the application. Also readable later with `Conn::head()`.
    Head(Head<'a>),
    /// Body bytes of the current request, a slice of the receive buffer: copy or use them
    /// before the next call (the borrow says so). Bodies come as `Data*` then `End`, always.
    Data(&'a [u8]),
    /// The request body is complete.
    End,
    /// The client waits for `100 Continue` before sending the body it announced, and the
    /// application now asked for it: append `encode::CONTINUE` to the output, then poll again.
    Continue,
    /// Nothing to do until more bytes arrive (`feed`), if `wants_read()`.
    NeedData,
    /// The request is read; the next one (possibly buffered already) waits until its response
    /// ends (`end_response`).
    Paused,
    /// The connection switched protocols: `take_upgraded()` has the bytes that followed.
    Upgraded,
    /// The connection is over: close it once the output is flushed.
    Closed,
}

/// What the connection does after `end_response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Poll for the next request (it may be buffered already).
    KeepAlive,
    /// Close once the output is flushed.
    Close,
    /// Hand the connection to the new protocol (`take_upgraded`).
    Upgrade,
}

/// Which timeout applies now (the I/O layer runs them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between requests with nothing received: the keep-alive idle timeout (also the first
    /// request's wait on a new connection).
    Idle,
    /// Part of a head received: the head timeout (slowloris).
    Head,
    /// The request body is not complete (the application may be waiting for it, or the rest
    /// is being drained): the body-stall timeout while the application waits.
    Body,
    /// The request is read and its response is not finished: the application's time.
    Respond,
    /// Switched protocols: not HTTP/1 any more.
    Upgraded,
    Closed,
}

#[derive(Debug)]
enum Reading {
    Head,
    Body(Decoder),
    Done,
    Upgraded,
    Closed,
}

#[derive(Debug)]
enum Writing {
    Waiting,
    Body(Encoder),
    /// The response ended while the request body was still coming: it is drained.
    Drain,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Continue {
    No,
    /// The client waits for `100 Continue`; not sent yet.
    Pending,
    Sent,
}

pub struct Conn {
    limits: Limits,
    /// The receive buffer: [head][consumed][unconsumed], compacted on `feed`.
    buf: Vec<u8>,
    /// First unconsumed byte.
    pos: usize,
    /// The current request's head in `buf` (empty between requests).
    head: Range<usize>,
    has_head: bool,
    scan: Scan,
    meta: Meta,
    reading: Reading,
    writing: Writing,
    keep_alive: bool,
    close_requested: bool,
    upgrade: bool,
    cont: Continue,
    eof: bool,
    /// The last `poll` said `NeedData`: more bytes are wanted whatever is buffered.
    starved: bool,
    drain_left: u64,
    error: Option<Error>,
}

/// `poll`'s result before it borrows the buffer.
enum Next {
    Head,
    Data(Range<usize>),
    End,
    Continue,
    NeedData,
    Paused,
    Upgraded,
    Closed,
}

impl Conn {
    pub fn new(limits: Limits) -> Conn {
        Conn {
            limits,
            buf: Vec::new(),
            pos: 0,
            head: 0..0,
            has_head: false,
            scan: Scan::head(),
            meta: Meta::default(),
            reading: Reading::Head,
            writing: Writing::Waiting,
            keep_alive: true,
            close_requested: false,
            upgrade: false,
            cont: Continue::No,
            eof: false,
            starved: false,
            drain_left: 0,
            error: None,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    // --- input

    /// Append received bytes. Ignored once closed or failed.
    pub fn feed(&mut self, data: &[u8]) {
        if matches!(self.reading, Reading::Closed) || self.error.is_some() {
            return;
        }
        self.compact(data.len());
        self.buf.extend_from_slice(data);
        self.starved = false;
    }

    /// The peer will send nothing more (EOF on the socket).
    pub fn feed_eof(&mut self) {
        self.eof = true;
    }

    /// Whether the peer closed its side (for ASGI's `http.disconnect`).
    pub fn peer_closed(&self) -> bool {
        self.eof
    }

    /// Move the head to the front and the unconsumed bytes right after it, when that is free
    /// (nothing unconsumed) or needed (no room for `need` more).
    fn compact(&mut self, need: usize) {
        let keep = if self.has_head { self.head.len() } else { 0 };
        if self.pos == keep {
            return;
        }
        let len = self.buf.len();
        if self.pos < len && self.buf.capacity() - len >= need {
            return;
        }
        if self.has_head && self.head.start > 0 {
            self.buf.copy_within(self.head.clone(), 0);
            self.head = 0..keep;
        }
        self.buf.copy_within(self.pos..len, keep);
        self.buf.truncate(keep + len - self.pos);
        self.pos = keep;
    }

    /// Whether the I/O layer should read the socket now: false once the unconsumed bytes
    /// reach `Limits::max_buffered` (back-pressure), after EOF, and when not HTTP/1 any more.
    /// True whenever `poll` last said `NeedData`: what is buffered then is an incomplete piece
    /// of framing (a head, a chunk-size line, trailers), each bounded by its own limit.
    pub fn wants_read(&self) -> bool {
        match self.reading {
            Reading::Upgraded | Reading::Closed => false,
            _ if self.eof || self.error.is_some() => false,
            Reading::Head => true,
            _ => self.starved || self.buf.len() - self.pos < self.limits.max_buffered,
        }
    }

    /// Bytes received and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The receive buffer's capacity (what the connection holds in memory).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub fn phase(&self) -> Phase {
        match self.reading {
            Reading::Head if self.pos == self.buf.len() && !self.scan.started() => Phase::Idle,
            Reading::Head => Phase::Head,
            Reading::Body(_) => Phase::Body,
            Reading::Done => Phase::Respond,
            Reading::Upgraded => Phase::Upgraded,
            Reading::Closed => Phase::Closed,
        }
    }

    // --- events

    /// The next thing to act on. `Err` is final: answer it with `write_error` and close.
    pub fn poll(&mut self) -> Result<Event<'_>, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let next = self.advance();
        self.starved = matches!(next, Ok(Next::NeedData));
        match next {
            Ok(next) => Ok(match next {
                Next::Head => Event::Head(Head::new(&self.buf[self.head.clone()], &self.meta)),
                Next::Data(r) => Event::Data(&self.buf[r]),
                Next::End => Event::End,
                Next::Continue => Event::Continue,
                Next::NeedData => Event::NeedData,
                Next::Paused => Event::Paused,
                Next::Upgraded => Event::Upgraded,
                Next::Closed => Event::Closed,
            }),
            Err(e) => {
                self.error = Some(e);
                self.reading = Reading::Closed;
                self.keep_alive = false;
                Err(e)
            }
        }
    }

    fn advance(&mut self) -> Result<Next, Error> {
        loop {
            let dec = match &mut self.reading {
                Reading::Head => return self.read_head(),
                Reading::Body(dec) => dec,
                Reading::Done => return Ok(Next::Paused),
                Reading::Upgraded => return Ok(Next::Upgraded),
                Reading::Closed => return Ok(Next::Closed),
            };
            let draining = matches!(self.writing, Writing::Drain);
            if self.cont == Continue::Pending {
                // Only ask for the body if the client is waiting for us: if bytes are here
                // it did not wait (RFC 9110 §10.1.1 lets the server skip the 100 then).
                if self.pos == self.buf.len() && !self.eof && !draining {
                    self.cont = Continue::Sent;
                    return Ok(Next::Continue);
                }
                self.cont = Continue::No;
            }
            let (n, step) = dec.decode(&self.buf[self.pos..], &self.limits)?;
            let at = self.pos;
            self.pos += n;
            match step {
                Step::Data(r) if draining => {
                    self.drain_left = self.drain_left.saturating_sub(r.len() as u64);
                    if self.drain_left == 0 && !dec.is_done() {
                        // More than we agreed to drop: close rather than read on.
                        self.reading = Reading::Closed;
                    }
                }
                Step::Data(r) => return Ok(Next::Data(at + r.start..at + r.end)),
                Step::End if draining => self.next_cycle(),
                Step::End => {
                    self.reading = Reading::Done;
                    return Ok(Next::End);
                }
                Step::NeedData if draining && self.eof => self.reading = Reading::Closed,
                Step::NeedData if self.eof => return Err(Error::IncompleteBody),
                Step::NeedData => return Ok(Next::NeedData),
            }
        }
    }

    fn read_head(&mut self) -> Result<Next, Error> {
        let l = &self.limits;
        let Some(found) = self.scan.scan(&self.buf[self.pos..], l.max_request_line, l.max_header_bytes)? else {
            if !self.eof {
                return Ok(Next::NeedData);
            }
            if self.scan.in_request() {
                return Err(Error::IncompleteHead);
            }
            self.reading = Reading::Closed;
            return Ok(Next::Closed);
        };
        let head = self.pos + found.start..self.pos + found.end;
        head::parse(&self.buf[head.clone()], &self.limits, &mut self.meta)?;
        self.pos = head.end;
        self.head = head;
        self.has_head = true;
        self.scan = Scan::head();
        self.reading = Reading::Body(match self.meta.framing {
            Framing::None => Decoder::Length(0),
            Framing::Length(n) => Decoder::Length(n),
            Framing::Chunked => Decoder::chunked(),
        });
        self.writing = Writing::Waiting;
        self.keep_alive = self.meta.keep_alive && !self.close_requested;
        self.upgrade = false;
        self.cont = if self.meta.expect_continue { Continue::Pending } else { Continue::No };
        Ok(Next::Head)
    }

    /// The current request's head, from `Event::Head` until its response ends.
    pub fn head(&self) -> Option<Head<'_>> {
        self.has_head.then(|| Head::new(&self.buf[self.head.clone()], &self.meta))
    }

    /// Whether the current request's body has been read to its end.
    fn body_done(&self) -> bool {
        match &self.reading {
            Reading::Body(d) => d.is_done(),
            _ => true,
        }
    }

    // --- output

    /// Start the response to the current request: the status line is appended to `out` now,
    /// fields with `Response::header`, and `Response::end` finishes the head. Dropping the
    /// `Response` unfinished takes its bytes back out of `out`.
    pub fn response<'c, 'o>(&'c mut self, out: &'o mut Vec<u8>, status: u16) -> Result<Response<'c, 'o>, EncodeError> {
        if !self.has_head || !matches!(self.writing, Writing::Waiting) || self.error.is_some() {
            return Err(EncodeError::NoRequest);
        }
        let switching = status == 101 || (self.meta.method_kind == Method::Connect && (200..300).contains(&status));
        if switching && ((status == 101 && self.meta.upgrade.is_none()) || !self.body_done()) {
            return Err(EncodeError::UpgradeNotRequested);
        }
        let answering = Answering {
            version: self.meta.version,
            head: self.meta.method_kind == Method::Head,
            connect: self.meta.method_kind == Method::Connect,
        };
        let w = HeadWriter::new(out, status, answering)?;
        Ok(Response { conn: self, w, switching, status })
    }

    /// Append `data` as body of the current response. Refused whole (and the connection will
    /// close) if it would exceed the Content-Length.
    pub fn write_body(&mut self, out: &mut Vec<u8>, data: &[u8]) -> Result<(), EncodeError> {
        let Writing::Body(enc) = &mut self.writing else { return Err(EncodeError::NotResponding) };
        enc.write(out, data).inspect_err(|_| self.keep_alive = false)
    }

    /// `write_body` for a body the caller sends itself (no copy into `out`): appends the
    /// framing that goes before `len` bytes and returns what goes after them, or `None` when
    /// they must not be sent (a response to HEAD).
    pub fn frame_body(&mut self, out: &mut Vec<u8>, len: usize) -> Result<Option<&'static [u8]>, EncodeError> {
        let Writing::Body(enc) = &mut self.writing else { return Err(EncodeError::NotResponding) };
        enc.frame(out, len).inspect_err(|_| self.keep_alive = false)
    }

    /// End the current response (the last chunk, if chunked) and say what comes next.
    pub fn end_response(&mut self, out: &mut Vec<u8>) -> Result<After, EncodeError> {
        self.end_response_with(out, |enc, out| enc.finish(out))
    }

    /// `end_response` with trailer fields after the last chunk; a body not chunked (a
    /// Content-Length the application gave, HTTP/1.0, HEAD) ends without them
    /// (`Encoder::finish_with_trailers`). A refused field fails the response (the connection
    /// closes).
    pub fn end_response_with_trailers<'f>(
        &mut self,
        out: &mut Vec<u8>,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<After, EncodeError> {
        self.end_response_with(out, |enc, out| enc.finish_with_trailers(out, fields).map(drop))
    }

    /// The request's HTTP version (the current request's, or the last one's).
    pub fn version(&self) -> Version {
        self.meta.version
    }

    fn end_response_with(
        &mut self,
        out: &mut Vec<u8>,
        finish: impl FnOnce(&mut Encoder, &mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Result<After, EncodeError> {
        let Writing::Body(enc) = &mut self.writing else { return Err(EncodeError::NotResponding) };
        if let Err(e) = finish(enc, out) {
            // The response cannot be completed: only closing tells the client.
            self.close();
            return Err(e);
        }
        if self.upgrade {
            self.writing = Writing::Closed;
            self.reading = Reading::Upgraded;
            return Ok(After::Upgrade);
        }
        if !self.keep_alive {
            self.close();
            return Ok(After::Close);
        }
        match &self.reading {
            Reading::Done => self.next_cycle(),
            Reading::Body(d) if d.is_done() => self.next_cycle(),
            Reading::Body(d) => {
                if d.remaining().is_some_and(|r| r > self.limits.max_drain) {
                    self.close();
                    return Ok(After::Close);
                }
                self.writing = Writing::Drain;
                self.drain_left = self.limits.max_drain;
            }
            _ => {
                self.close();
                return Ok(After::Close);
            }
        }
        Ok(After::KeepAlive)
    }

    /// Answer an error (a protocol `Error`'s status, or 408/500/503 of the server's own) with a
    /// complete canned response, if no byte of a response was produced; the connection then
    /// closes. Returns whether anything was written.
    pub fn write_error(&mut self, out: &mut Vec<u8>, status: u16, stamp: &Stamp<'_>) -> bool {
        let can = matches!(self.writing, Writing::Waiting) && !matches!(self.reading, Reading::Upgraded);
        if can {
            canned(out, status, stamp);
        }
        self.close();
        can
    }

    /// The server decided to close (shutdown, request quota): the current response (if not
    /// yet written) says `connection: close`, and no further request is read.
    pub fn set_close(&mut self) {
        self.close_requested = true;
        self.keep_alive = false;
    }

    /// Whether the connection will close after the current response.
    pub fn will_close(&self) -> bool {
        !self.keep_alive
    }

    /// After `After::Upgrade`: the bytes received after the request, which belong to the new
    /// protocol. The connection is closed for HTTP/1 from then on.
    pub fn take_upgraded(&mut self) -> Vec<u8> {
        if !matches!(self.reading, Reading::Upgraded) {
            return Vec::new();
        }
        let mut rest = std::mem::take(&mut self.buf);
        rest.drain(..self.pos);
        self.pos = 0;
        self.has_head = false;
        self.reading = Reading::Closed;
        rest
    }

    fn close(&mut self) {
        self.keep_alive = false;
        self.reading = Reading::Closed;
        self.writing = Writing::Closed;
    }

    /// Both halves are done and the connection is kept: forget the request.
    fn next_cycle(&mut self) {
        self.has_head = false;
        self.head = 0..0;
        self.reading = Reading::Head;
        self.writing = Writing::Waiting;
        self.cont = Continue::No;
        self.upgrade = false;
    }
}

/// A response head being written (see `Conn::response`).
pub struct Response<'c, 'o> {
    conn: &'c mut Conn,
    w: HeadWriter<'o>,
    switching: bool,
    status: u16,
}

impl Response<'_, '_> {
    /// Append one field; refused (and nothing of the head kept) if the name is not a token or
    /// the value holds CR, LF or NUL.
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), EncodeError> {
        self.w.header(name, value)
    }

    /// Finish the head. `body_len`: the whole body's length if known now (it becomes the
    /// Content-Length when the application gave none); `stamp`: `date`/`server` to add.
    pub fn end(mut self, body_len: Option<u64>, stamp: &Stamp<'_>) -> Result<(), EncodeError> {
        let conn = &mut *self.conn;
        if self.w.is_interim() {
            self.w.end(None, true, stamp)?;
            if self.status == 100 && conn.cont == Continue::Pending {
                conn.cont = Continue::Sent;
            }
            return Ok(());
        }
        let mut keep_alive = conn.keep_alive;
        if conn.cont == Continue::Pending && !conn.body_done() {
            // The client may never send the body it is waiting to be asked for; we cannot
            // tell its body from its next request without reading it, so we close.
            keep_alive = false;
        }
        let (encoder, keep_alive) = self.w.end(body_len, keep_alive, stamp)?;
        conn.cont = Continue::No;
        conn.keep_alive = keep_alive;
        conn.upgrade = self.switching;
        conn.writing = Writing::Body(encoder);
        Ok(())
    }
}
