//! The two kinds of error, each variant one rule.
//!
//! `Error` is the peer's fault: a request that breaks a rule of RFC 9110/9112 or one of our
//! `Limits`. Each carries the status the server answers with and a short static rule name that
//! the server logs at debug level; after one, the connection is closed (h11's "one place where a
//! remote error becomes a response": `Conn::write_error`). There is never a second
//! interpretation: the smuggling rules are errors, not repairs.
//!
//! `EncodeError` is the application's fault: a response the writer refuses to put on the wire
//! (a header value with CR/LF, a body longer than its Content-Length). Nothing of the refused
//! piece is written; if the head was not sent yet the server can still answer 500.

use std::fmt;

/// A request that breaks a rule: answered with `status()`, logged with `rule()`, then closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    // --- the head's bytes (400)
    /// A CR not followed by LF, anywhere in a head, chunk line or trailer section.
    BareCr,
    /// An LF not preceded by CR (RFC 9112 §2.2 lets a server accept it; we do not).
    BareLf,
    /// The method is empty or not a token.
    InvalidMethod,
    /// The request line is not `method SP request-target SP HTTP-version CRLF`.
    InvalidRequestLine,
    /// The request-target holds a byte outside VCHAR (controls, spaces, non-ASCII).
    InvalidTarget,
    /// The request-target's form does not fit the method (`*` outside OPTIONS, authority-form
    /// outside CONNECT, CONNECT without authority-form) or fits none of the four forms.
    TargetForm,
    /// The version is not `HTTP/` DIGIT `.` DIGIT.
    InvalidVersion,
    /// A well-formed version other than HTTP/1.0 and HTTP/1.1 (505).
    VersionNotSupported,
    /// A field name that is not a token (including an empty one).
    InvalidHeaderName,
    /// Whitespace between a field name and its colon (RFC 9112 §5.1: MUST reject with 400).
    SpaceBeforeColon,
    /// A field value with a control byte other than HTAB (NUL, DEL, ...).
    InvalidHeaderValue,
    /// A line that starts with SP or HTAB: obs-fold, or whitespace before the first field.
    ObsFold,
    /// HTTP/1.1 without `Host` (RFC 9112 §3.2).
    MissingHost,
    /// More than one `Host` field line.
    DuplicateHost,
    /// A `Host` value that cannot be `uri-host [ ":" port ]`.
    InvalidHost,

    // --- framing: each a smuggling vector (400)
    /// Both Transfer-Encoding and Content-Length.
    ContentLengthAndTransferEncoding,
    /// Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1: the framing is faulty).
    TransferEncodingHttp10,
    /// Transfer-Encoding whose final coding is not exactly `chunked`.
    TransferEncodingNotChunked,
    /// `chunked` applied twice (RFC 9112 §6.1: a sender MUST NOT).
    ChunkedTwice,
    /// Content-Length that is not 1*DIGIT (sign, hex, inner space, empty) or overflows u64.
    InvalidContentLength,
    /// Several Content-Length values that disagree.
    ContentLengthMismatch,
    /// A chunk size without digits, with a sign, `0x`, or bytes after the digits.
    InvalidChunkSize,
    /// A chunk size that overflows u64.
    ChunkSizeOverflow,
    /// A chunk extension that is not `;name[=token|quoted-string]`.
    InvalidChunkExtension,
    /// A chunk-size line longer than `MAX_CHUNK_LINE`.
    ChunkLineTooLong,
    /// Chunk data not followed by exactly CRLF.
    ChunkDataEnding,
    /// A trailer field with a bad name or value.
    InvalidTrailer,
    /// The peer closed inside a head.
    IncompleteHead,
    /// The peer closed inside a body.
    IncompleteBody,

    // --- limits
    /// Request line longer than `Limits::max_request_line` (414).
    RequestLineTooLong,
    /// Field section (or trailer section) larger than `Limits::max_header_bytes` (431).
    HeaderSectionTooLarge,
    /// More fields (or trailer fields) than `Limits::max_headers` (431).
    TooManyHeaders,
    /// A body larger than `Limits::max_body` (413).
    BodyTooLarge,

    // --- what we do not implement
    /// A transfer coding before `chunked` (gzip, ...): RFC 9112 §6.1 says 501.
    TransferCodingNotImplemented,
}

impl Error {
    /// The status code the server answers with.
    pub const fn status(self) -> u16 {
        use Error::*;
        match self {
            RequestLineTooLong => 414,
            HeaderSectionTooLarge | TooManyHeaders => 431,
            BodyTooLarge => 413,
            VersionNotSupported => 505,
            TransferCodingNotImplemented => 501,
            _ => 400,
        }
    }

    /// The rule broken, short and static, for the debug log.
    pub const fn rule(self) -> &'static str {
        use Error::*;
        match self {
            BareCr => "bare-cr",
            BareLf => "bare-lf",
            InvalidMethod => "invalid-method",
            InvalidRequestLine => "invalid-request-line",
            InvalidTarget => "invalid-request-target",
            TargetForm => "request-target-form",
            InvalidVersion => "invalid-version",
            VersionNotSupported => "version-not-supported",
            InvalidHeaderName => "invalid-header-name",
            SpaceBeforeColon => "space-before-colon",
            InvalidHeaderValue => "invalid-header-value",
            ObsFold => "obs-fold",
            MissingHost => "missing-host",
            DuplicateHost => "duplicate-host",
            InvalidHost => "invalid-host",
            ContentLengthAndTransferEncoding => "content-length-and-transfer-encoding",
            TransferEncodingHttp10 => "transfer-encoding-in-http10",
            TransferEncodingNotChunked => "transfer-encoding-not-chunked",
            ChunkedTwice => "chunked-twice",
            InvalidContentLength => "invalid-content-length",
            ContentLengthMismatch => "content-length-mismatch",
            InvalidChunkSize => "invalid-chunk-size",
            ChunkSizeOverflow => "chunk-size-overflow",
            InvalidChunkExtension => "invalid-chunk-extension",
            ChunkLineTooLong => "chunk-line-too-long",
            ChunkDataEnding => "chunk-data-ending",
            InvalidTrailer => "invalid-trailer",
            IncompleteHead => "incomplete-head",
            IncompleteBody => "incomplete-body",
            RequestLineTooLong => "request-line-too-long",
            HeaderSectionTooLarge => "header-section-too-large",
            TooManyHeaders => "too-many-headers",
            BodyTooLarge => "body-too-large",
            TransferCodingNotImplemented => "transfer-coding-not-implemented",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.rule(), self.status())
    }
}

impl std::error::Error for Error {}

/// A response the writer refuses: nothing of it was written. The server answers 500 if the
/// head was not sent yet, and closes the connection otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncodeError {
    /// No request is waiting for this response (or its response was already started).
    NoRequest,
    /// `write_body`/`end_response` without a response head.
    NotResponding,
    /// A status outside 100..=999.
    InvalidStatus,
    /// A field name that is not a token.
    InvalidHeaderName,
    /// A field value with CR, LF or NUL (response splitting).
    InvalidHeaderValue,
    /// A Content-Length value that is not 1*DIGIT.
    InvalidContentLength,
    /// Two Content-Length fields.
    DuplicateContentLength,
    /// Content-Length and Transfer-Encoding, or a Transfer-Encoding other than `chunked`.
    UnsupportedTransferEncoding,
    /// The known body length and the Content-Length given disagree.
    ContentLengthMismatch,
    /// More body bytes than Content-Length declared.
    BodyTooLong,
    /// Fewer body bytes than Content-Length declared when the response ended.
    BodyTooShort,
    /// Body bytes for a 1xx, 204 or 304 response.
    BodyNotAllowed,
    /// A 101 for a request that asked for no upgrade (or is not yet fully read).
    UpgradeNotRequested,
}

impl EncodeError {
    /// The rule broken, short and static, for the log.
    pub const fn rule(self) -> &'static str {
        use EncodeError::*;
        match self {
            NoRequest => "no-request",
            NotResponding => "not-responding",
            InvalidStatus => "invalid-status",
            InvalidHeaderName => "invalid-response-header-name",
            InvalidHeaderValue => "invalid-response-header-value",
            InvalidContentLength => "invalid-response-content-length",
            DuplicateContentLength => "duplicate-response-content-length",
            UnsupportedTransferEncoding => "unsupported-response-transfer-encoding",
            ContentLengthMismatch => "response-content-length-mismatch",
            BodyTooLong => "body-longer-than-content-length",
            BodyTooShort => "body-shorter-than-content-length",
            BodyNotAllowed => "body-not-allowed",
            UpgradeNotRequested => "upgrade-not-requested",
        }
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())
    }
}

impl std::error::Error for EncodeError {}
