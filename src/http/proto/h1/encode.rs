//! The response writer: a head into the caller's `Vec<u8>`, then the body framed.
//!
//! Why appended to a caller's vector: the I/O layer keeps one output vector per connection and
//! flushes it once per loop iteration, so a head, a small body and the next pipelined response
//! go out in one `send` with no allocation of ours. Numbers are formatted by hand (`push_decimal`,
//! `push_hex`), never through `fmt`.
//!
//! What the writer owns, and the application therefore cannot get wrong:
//! - **framing**: Content-Length when the application gives one or the whole body is known when
//!   the head is written; `Transfer-Encoding: chunked` otherwise on HTTP/1.1; close-delimited
//!   on HTTP/1.0. No body for HEAD, 1xx, 204, 304 and a 2xx to CONNECT. For HEAD and 304 the
//!   framing fields the application set are kept (RFC 9110 §9.3.2 and §15.4.5 let them tell the
//!   length a GET/200 would have); for 1xx, 204 and CONNECT 2xx they are dropped (§8.6 and
//!   §9.3.6: MUST NOT send them).
//! - **`connection`**: hop-by-hop and the server's: the application's is not written (except on
//!   a 101, where it carries `upgrade`), a `close` token in it is obeyed, and the writer says
//!   `close` when the connection will close, or `keep-alive` to an HTTP/1.0 client it keeps.
//! - **refusals**: a field name that is not a token, or a value with CR, LF or NUL, is refused
//!   and nothing of the head stays in the vector (the head is truncated back to where it
//!   started, also when a `HeadWriter` is dropped unfinished), so a 500 can still be sent.

use super::date::Stamp;
use super::error::EncodeError;
use super::head::Version;
use super::syntax::{is_token, list, parse_decimal, push_decimal, push_hex, trim_ows};

/// The interim response the server sends when the application first asks for the body of an
/// `Expect: 100-continue` request.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The reason phrase the writer puts after a status (RFC 9110 §15; empty for unknown codes,
/// which the grammar allows).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        511 => "Network Authentication Required",
        _ => "",
    }
}

fn push_status_line(out: &mut Vec<u8>, status: u16) {
    if status == 200 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn push_stamp(out: &mut Vec<u8>, stamp: &Stamp<'_>, has_date: bool, has_server: bool) {
    if let (Some(date), false) = (stamp.date, has_date) {
        push_field(out, b"date", date);
    }
    if let (Some(server), false) = (stamp.server, has_server) {
        push_field(out, b"server", server);
    }
}

/// A complete response the server sends on its own (400/408/413/414/431/500/503/505...):
/// `content-length`, `connection: close`, the reason phrase as a plain-text body.
pub fn canned(out: &mut Vec<u8>, status: u16, stamp: &Stamp<'_>) {
    let body = reason(status).as_bytes();
    push_status_line(out, status);
    out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\ncontent-length: ");
    push_decimal(out, body.len() as u64);
    out.extend_from_slice(b"\r\nconnection: close\r\n");
    push_stamp(out, stamp, false, false);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// How the body of a response is framed on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoder {
    /// Content-Length: bytes still owed.
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked,
    /// Delimited by closing the connection (HTTP/1.0, length unknown).
    Close,
    /// A response to HEAD: the body is dropped, whatever its size.
    Discard,
    /// 1xx, 204, 304, CONNECT 2xx: there is no body, and giving one is an error.
    Empty,
}

impl Encoder {
    /// Append `data` framed. A body longer than the Content-Length is refused whole.
    pub fn write(&mut self, out: &mut Vec<u8>, data: &[u8]) -> Result<(), EncodeError> {
        if let Some(suffix) = self.frame(out, data.len())? {
            out.extend_from_slice(data);
            out.extend_from_slice(suffix);
        }
        Ok(())
    }

    /// Frame `len` body bytes that the caller will send itself (a large body need not be
    /// copied into `out`): appends what goes before them and returns what goes after them, or
    /// `None` if they must not be sent (HEAD).
    pub fn frame(&mut self, out: &mut Vec<u8>, len: usize) -> Result<Option<&'static [u8]>, EncodeError> {
        match self {
            Encoder::Length(rem) => {
                *rem = rem.checked_sub(len as u64).ok_or(EncodeError::BodyTooLong)?;
                Ok(Some(b""))
            }
            Encoder::Chunked if len == 0 => Ok(Some(b"")),
            Encoder::Chunked => {
                push_hex(out, len as u64);
                out.extend_from_slice(b"\r\n");
                Ok(Some(b"\r\n"))
            }
            Encoder::Close => Ok(Some(b"")),
            Encoder::Discard => Ok(None),
            Encoder::Empty if len == 0 => Ok(Some(b"")),
            Encoder::Empty => Err(EncodeError::BodyNotAllowed),
        }
    }

    /// End the body: the last chunk, or a check that the Content-Length was met.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Encoder::Length(0) => Ok(()),
            Encoder::Length(_) => Err(EncodeError::BodyTooShort),
            Encoder::Chunked => {
                out.extend_from_slice(b"0\r\n\r\n");
                *self = Encoder::Empty;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// End the body with trailer fields (RFC 9112 §7.1.2): on a chunked body they follow the
    /// last chunk; any other framing has no place for them, so they are dropped (`Ok(false)`)
    /// and the body ends as `finish` ends it. Each field is checked as a head's is (a refusal
    /// leaves `out` as it was); framing and hop-by-hop fields are not written (RFC 9110
    /// §6.5.1: a trailer must not carry what frames the message).
    pub fn finish_with_trailers<'f>(
        &mut self,
        out: &mut Vec<u8>,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<bool, EncodeError> {
        if *self != Encoder::Chunked {
            return self.finish(out).map(|()| false);
        }
        let start = out.len();
        out.extend_from_slice(b"0\r\n");
        for (name, value) in fields {
            if let Err(e) = check_field(name, value) {
                out.truncate(start);
                return Err(e);
            }
            if !is_framing_field(name) {
                push_field(out, name, value);
            }
        }
        out.extend_from_slice(b"\r\n");
        *self = Encoder::Empty;
        Ok(true)
    }

    /// Whether only closing the connection ends this body.
    pub fn closes(&self) -> bool {
        *self == Encoder::Close
    }
}

/// A field the writer would refuse in a head: a name that is not a token, a value with CR, LF
/// or NUL (response splitting).
pub fn check_field(name: &[u8], value: &[u8]) -> Result<(), EncodeError> {
    if !is_token(name) {
        return Err(EncodeError::InvalidHeaderName);
    }
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(EncodeError::InvalidHeaderValue);
    }
    Ok(())
}

/// Fields that frame a message or belong to one connection: never in trailers.
fn is_framing_field(name: &[u8]) -> bool {
    [&b"content-length"[..], b"transfer-encoding", b"connection", b"keep-alive", b"te", b"trailer", b"upgrade", b"host"]
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f))
}

/// What kind of response, for framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 100, 102, 103: interim; the final response follows.
    Interim,
    /// 101: the connection changes protocol after the head.
    Switching,
    /// 204, or a 2xx to CONNECT: no body and no framing fields.
    Bare,
    /// A response to HEAD, or a 304: no body; the application's framing fields are kept.
    Bodiless { head: bool },
    /// Everything else.
    Normal,
}

/// What the writer needs to know of the request it answers.
#[derive(Debug, Clone, Copy)]
pub struct Answering {
    pub version: Version,
    pub head: bool,
    pub connect: bool,
}

/// A response head being written; fields are checked and appended one at a time.
pub struct HeadWriter<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    kind: Kind,
    v10: bool,
    content_length: Option<u64>,
    chunked: bool,
    has_date: bool,
    has_server: bool,
    close: bool,
    failed: Option<EncodeError>,
    done: bool,
}

impl<'o> HeadWriter<'o> {
    /// Start a head: the status line is appended at once.
    pub fn new(out: &'o mut Vec<u8>, status: u16, req: Answering) -> Result<HeadWriter<'o>, EncodeError> {
        if !(100..=999).contains(&status) {
            return Err(EncodeError::InvalidStatus);
        }
        let kind = match status {
            101 => Kind::Switching,
            100..=199 => Kind::Interim,
            204 => Kind::Bare,
            200..=299 if req.connect => Kind::Bare,
            _ if req.head => Kind::Bodiless { head: true },
            304 => Kind::Bodiless { head: false },
            _ => Kind::Normal,
        };
        let start = out.len();
        push_status_line(out, status);
        Ok(HeadWriter {
            out,
            start,
            kind,
            v10: req.version == Version::Http10,
            content_length: None,
            chunked: false,
            has_date: false,
            has_server: false,
            close: false,
            failed: None,
            done: false,
        })
    }

    pub fn is_interim(&self) -> bool {
        self.kind == Kind::Interim
    }

    fn fail(&mut self, e: EncodeError) -> EncodeError {
        self.out.truncate(self.start);
        self.failed = Some(e);
        e
    }

    /// Check and append one field. On a refusal nothing of the head stays in the vector and
    /// every later call fails with the same error.
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), EncodeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if !is_token(name) {
            return Err(self.fail(EncodeError::InvalidHeaderName));
        }
        if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(self.fail(EncodeError::InvalidHeaderValue));
        }
        let drop_framing = matches!(self.kind, Kind::Interim | Kind::Switching | Kind::Bare);
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"date") => self.has_date = true,
            6 if name.eq_ignore_ascii_case(b"server") => self.has_server = true,
            10 if name.eq_ignore_ascii_case(b"connection") => {
                self.close |= list(value).any(|t| t.eq_ignore_ascii_case(b"close"));
                if self.kind != Kind::Switching {
                    return Ok(());
                }
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                if drop_framing {
                    return Ok(());
                }
                let Some(n) = parse_decimal(value) else { return Err(self.fail(EncodeError::InvalidContentLength)) };
                if self.content_length.is_some() {
                    return Err(self.fail(EncodeError::DuplicateContentLength));
                }
                if self.chunked {
                    return Err(self.fail(EncodeError::UnsupportedTransferEncoding));
                }
                self.content_length = Some(n);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                if drop_framing {
                    return Ok(());
                }
                if matches!(self.kind, Kind::Normal) {
                    // We frame chunked ourselves; any other coding would need us to apply it.
                    if !trim_ows(value).eq_ignore_ascii_case(b"chunked")
                        || self.content_length.is_some()
                        || self.chunked
                    {
                        return Err(self.fail(EncodeError::UnsupportedTransferEncoding));
                    }
                    self.chunked = true;
                    if self.v10 {
                        // An HTTP/1.0 client cannot read chunked: the body is close-delimited.
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
        push_field(self.out, name, value);
        Ok(())
    }

    /// Finish the head: framing fields, `connection`, `date`/`server` unless the application
    /// gave them, the empty line. `body_len` is the whole body's length when it is known now;
    /// `keep_alive` whether the server means to keep the connection. Returns the body's encoder
    /// and whether the connection is kept after this response.
    pub fn end(
        &mut self,
        body_len: Option<u64>,
        mut keep_alive: bool,
        stamp: &Stamp<'_>,
    ) -> Result<(Encoder, bool), EncodeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let encoder = match self.kind {
            Kind::Interim | Kind::Switching | Kind::Bare => Encoder::Empty,
            Kind::Bodiless { head } => {
                if let (true, None, false, Some(n)) = (head, self.content_length, self.chunked, body_len) {
                    push_field_decimal(self.out, b"content-length", n);
                }
                if head {
                    Encoder::Discard
                } else {
                    Encoder::Empty
                }
            }
            Kind::Normal => match (self.content_length, body_len) {
                (Some(cl), Some(n)) if cl != n => return Err(self.fail(EncodeError::ContentLengthMismatch)),
                (Some(cl), _) => Encoder::Length(cl),
                (None, _) if self.chunked && !self.v10 => Encoder::Chunked,
                (None, Some(n)) => {
                    push_field_decimal(self.out, b"content-length", n);
                    Encoder::Length(n)
                }
                (None, None) if !self.v10 => {
                    self.out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                    Encoder::Chunked
                }
                (None, None) => Encoder::Close,
            },
        };
        keep_alive &= !self.close && !encoder.closes();
        match self.kind {
            Kind::Interim => {}
            Kind::Switching => push_stamp(self.out, stamp, self.has_date, self.has_server),
            _ => {
                if !keep_alive {
                    self.out.extend_from_slice(b"connection: close\r\n");
                } else if self.v10 {
                    self.out.extend_from_slice(b"connection: keep-alive\r\n");
                }
                push_stamp(self.out, stamp, self.has_date, self.has_server);
            }
        }
        self.out.extend_from_slice(b"\r\n");
        self.done = true;
        Ok((encoder, keep_alive))
    }
}

fn push_field_decimal(out: &mut Vec<u8>, name: &[u8], n: u64) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    push_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

impl Drop for HeadWriter<'_> {
    /// A head never finished is never half-sent.
    fn drop(&mut self) {
        if !self.done {
            self.out.truncate(self.start);
        }
    }
}
