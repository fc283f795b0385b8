//! The three kinds of error, each variant one rule.
//!
//! `Malformed` is the peer's fault on one stream: a request head that breaks a rule of RFC 9113
//! §8 that h2 leaves to its caller. The stream is reset with PROTOCOL_ERROR and never reaches
//! the application; the connection and its other streams go on. (The rules h2 enforces itself
//! end the same way inside h2 — `connection`/`te` fields, pseudo-headers out of place, a
//! content-length that the DATA does not add up to — or, where h2's HPACK decoder stops in the
//! middle of a block, end the whole connection: an uppercase field name or a value with a
//! control byte. RFC 9113 §5.4 lets any stream error be treated as a connection error.)
//!
//! `SendError` is the caller's fault, or news it had not polled yet: a response refused before
//! anything of it was queued.
//!
//! `ConnError` is why a connection ended, for the log: h2's error, with the GOAWAY reason when
//! there was one and who sent it.

use std::fmt;

use h2::Reason;

/// A request head h2 accepted but RFC 9113 §8.3.1 (or our request rules) does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// No `:path` on a request other than (classic) CONNECT.
    MissingPath,
    /// A `:path` that is neither origin-form (`/…`) nor `*` on OPTIONS.
    PathForm,
    /// A `:path` with a byte outside VCHAR (h1 refuses the same target).
    InvalidPath,
    /// CONNECT without `:protocol` and without `:authority` (RFC 9113 §8.5).
    ConnectWithoutAuthority,
    /// A field value that starts or ends with SP or HTAB (RFC 9113 §8.2.1: "MUST NOT"; h2's
    /// HPACK decoder and `http::HeaderValue` let it through).
    FieldValueWhitespace,
    /// A `host` field that names another authority than `:authority` (RFC 9113 §8.3.1: a
    /// server SHOULD treat it as malformed; two answers to "which host" is a smuggling vector).
    HostMismatch,
}

impl Malformed {
    /// The rule broken, short and static, for the debug log.
    pub const fn rule(self) -> &'static str {
        match self {
            Malformed::MissingPath => "missing-path",
            Malformed::PathForm => "path-form",
            Malformed::InvalidPath => "invalid-path",
            Malformed::ConnectWithoutAuthority => "connect-without-authority",
            Malformed::FieldValueWhitespace => "field-value-whitespace",
            Malformed::HostMismatch => "host-authority-mismatch",
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())
    }
}

impl std::error::Error for Malformed {}

/// A response (or part of one) refused: nothing of it was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendError {
    /// No open stream has this id: never opened, or its response ended, or it was reset (the
    /// `Reset` event for it may still be waiting in `poll`).
    UnknownStream,
    /// `respond` twice, or `informational` after `respond`.
    AlreadyResponded,
    /// `send_data`/`send_trailers` before `respond`.
    NotResponding,
    /// A final status outside 200..=999, or an interim one outside 100..=199 (101 included:
    /// HTTP/2 has no protocol switch, RFC 9113 §8.6).
    InvalidStatus,
    /// A field name that is not a token (or a pseudo-header).
    InvalidFieldName,
    /// A field value with CR, LF, NUL or another control byte but HTAB.
    InvalidFieldValue,
    /// h2 refused the frame: the stream was reset meanwhile (its `Reset` event is coming) or
    /// the connection is closing.
    StreamClosed,
}

impl SendError {
    /// The rule broken, short and static, for the log.
    pub const fn rule(self) -> &'static str {
        match self {
            SendError::UnknownStream => "unknown-stream",
            SendError::AlreadyResponded => "already-responded",
            SendError::NotResponding => "not-responding",
            SendError::InvalidStatus => "invalid-status",
            SendError::InvalidFieldName => "invalid-response-field-name",
            SendError::InvalidFieldValue => "invalid-response-field-value",
            SendError::StreamClosed => "stream-closed",
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())
    }
}

impl std::error::Error for SendError {}

/// Why a connection ended other than cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnError {
    /// The GOAWAY (or RST) reason, if the end had one; `None` for an I/O-level end (the peer's
    /// EOF inside a frame, a bad preface).
    pub reason: Option<Reason>,
    /// The peer sent the GOAWAY; else we did (its rule broken) or the transport ended.
    pub remote: bool,
    /// h2's description, for the log.
    pub detail: String,
}

impl ConnError {
    pub(super) fn from_h2(e: &h2::Error) -> ConnError {
        ConnError { reason: e.reason(), remote: e.is_remote(), detail: e.to_string() }
    }

    /// An end we chose (a limit of ours, `abort`).
    pub(super) fn ours(reason: Reason, detail: &str) -> ConnError {
        ConnError { reason: Some(reason), remote: false, detail: detail.to_owned() }
    }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for ConnError {}
