//! The errors of a WebSocket connection, each variant one rule (as `h1::error`).
//!
//! `HandshakeError` is a refused upgrade request: the HTTP status to answer it with (400, or
//! 426 with `Sec-WebSocket-Version: 13` for a version we do not speak) and a short rule name for
//! the debug log. `Error` is the peer breaking RFC 6455 (or RFC 7692, or our size limit) after
//! the upgrade: it carries the close code we send before closing the TCP connection ("Fail the
//! WebSocket Connection", RFC 6455 §7.1.7). `SendError` is the application's mistake: a frame
//! the writer refuses; nothing of it was written.

use std::fmt;

/// An upgrade request that breaks a rule of RFC 6455 §4.2.1: answered with `status()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandshakeError {
    /// The method is not GET (§4.1: "The method of the request MUST be GET").
    MethodNotGet,
    /// An extended CONNECT (RFC 8441) whose method is not CONNECT.
    MethodNotConnect,
    /// The request is not HTTP/1.1 or later (HTTP/1.0 has no `Upgrade`).
    VersionBelowHttp11,
    /// No `Upgrade` field whose token list names `websocket`.
    MissingUpgradeWebsocket,
    /// No `Connection` field whose token list names `upgrade`.
    MissingConnectionUpgrade,
    /// No `Sec-WebSocket-Version`, or not 13 (426, with `Sec-WebSocket-Version: 13`).
    UnsupportedVersion,
    /// No `Sec-WebSocket-Key`, or more than one.
    MissingKey,
    /// A `Sec-WebSocket-Key` that is not the base64 of 16 bytes (§4.1: a nonce of 16 bytes).
    InvalidKey,
    /// A `Sec-WebSocket-Protocol` value that is not a comma-separated list of tokens.
    InvalidSubprotocol,
    /// A `Sec-WebSocket-Extensions` value that does not parse as RFC 6455 §9.1's list.
    InvalidExtensions,
}

impl HandshakeError {
    /// The status code the server answers with.
    pub const fn status(self) -> u16 {
        match self {
            HandshakeError::UnsupportedVersion => 426,
            _ => 400,
        }
    }

    /// A header the answer must carry: §4.4 wants the versions we speak with a 426.
    pub const fn header(self) -> Option<(&'static [u8], &'static [u8])> {
        match self {
            HandshakeError::UnsupportedVersion => Some((b"sec-websocket-version", b"13")),
            _ => None,
        }
    }

    /// The rule broken, short and static, for the debug log.
    pub const fn rule(self) -> &'static str {
        use HandshakeError::*;
        match self {
            MethodNotGet => "ws-method-not-get",
            MethodNotConnect => "ws-method-not-connect",
            VersionBelowHttp11 => "ws-version-below-http11",
            MissingUpgradeWebsocket => "ws-missing-upgrade-websocket",
            MissingConnectionUpgrade => "ws-missing-connection-upgrade",
            UnsupportedVersion => "ws-unsupported-version",
            MissingKey => "ws-missing-key",
            InvalidKey => "ws-invalid-key",
            InvalidSubprotocol => "ws-invalid-subprotocol",
            InvalidExtensions => "ws-invalid-extensions",
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.rule(), self.status())
    }
}

impl std::error::Error for HandshakeError {}

/// Close codes we send (RFC 6455 §7.4.1).
pub mod code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// Never sent: what the application is told when a close frame had no code.
    pub const NO_STATUS: u16 = 1005;
    /// Never sent: what the application is told when the TCP connection ended without a close.
    pub const ABNORMAL: u16 = 1006;
    pub const INVALID_PAYLOAD: u16 = 1007;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    pub const INTERNAL_ERROR: u16 = 1011;
}

/// A frame or message that breaks a rule: we send a close frame with `code()`, then close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    // --- frame header (1002)
    /// RSV2 or RSV3 set (no extension we negotiate defines them).
    ReservedBits,
    /// RSV1 set without permessage-deflate, on a control frame, or on a continuation frame
    /// (RFC 7692 §6: only the first frame of a message carries it).
    UnexpectedRsv1,
    /// Opcode 0x3-0x7 or 0xB-0xF.
    ReservedOpcode,
    /// A client frame without a mask (§5.1: the server MUST close the connection).
    UnmaskedFrame,
    /// A 64-bit payload length with its most significant bit set (§5.2).
    LengthOverflow,
    /// A control frame with FIN clear (§5.5: control frames MUST NOT be fragmented).
    FragmentedControl,
    /// A control frame payload longer than 125 bytes (§5.5).
    ControlTooLong,
    // --- fragmentation (1002)
    /// A continuation frame with no message started.
    UnexpectedContinuation,
    /// A text or binary frame while a fragmented message is unfinished.
    ExpectedContinuation,
    // --- close frames
    /// A close payload of one byte (a code is two).
    CloseCodeTruncated,
    /// A close code that may not be sent (<1000, 1004-1006, 1015, 1016-2999, >4999).
    InvalidCloseCode,
    /// A close reason that is not UTF-8 (1007).
    InvalidCloseReason,
    // --- payload data
    /// A text message that is not UTF-8, found as early as the bytes allow (1007).
    InvalidUtf8,
    /// A compressed message that is not a valid raw DEFLATE stream (1007).
    InvalidDeflate,
    /// A message larger than the limit, decompressed size included (1009).
    MessageTooBig,
}

impl Error {
    /// The close code we send.
    pub const fn code(self) -> u16 {
        use Error::*;
        match self {
            InvalidCloseReason | InvalidUtf8 | InvalidDeflate => code::INVALID_PAYLOAD,
            MessageTooBig => code::MESSAGE_TOO_BIG,
            _ => code::PROTOCOL_ERROR,
        }
    }

    /// The rule broken, short and static, for the debug log.
    pub const fn rule(self) -> &'static str {
        use Error::*;
        match self {
            ReservedBits => "ws-reserved-bits",
            UnexpectedRsv1 => "ws-unexpected-rsv1",
            ReservedOpcode => "ws-reserved-opcode",
            UnmaskedFrame => "ws-unmasked-frame",
            LengthOverflow => "ws-length-overflow",
            FragmentedControl => "ws-fragmented-control",
            ControlTooLong => "ws-control-too-long",
            UnexpectedContinuation => "ws-unexpected-continuation",
            ExpectedContinuation => "ws-expected-continuation",
            CloseCodeTruncated => "ws-close-code-truncated",
            InvalidCloseCode => "ws-invalid-close-code",
            InvalidCloseReason => "ws-invalid-close-reason",
            InvalidUtf8 => "ws-invalid-utf8",
            InvalidDeflate => "ws-invalid-deflate",
            MessageTooBig => "ws-message-too-big",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.rule(), self.code())
    }
}

impl std::error::Error for Error {}

/// A frame the writer refuses: nothing of it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendError {
    /// A data frame or ping after our close frame (§5.5.1), or anything after the connection
    /// ended.
    Closing,
    /// A close code that may not be sent (1005, 1006, 1015 and the unassigned ranges).
    InvalidCloseCode,
    /// A close reason longer than 123 bytes (a control payload is at most 125, code included).
    CloseReasonTooLong,
    /// A ping or pong payload longer than 125 bytes.
    ControlTooLong,
}

impl SendError {
    pub const fn rule(self) -> &'static str {
        match self {
            SendError::Closing => "ws-send-after-close",
            SendError::InvalidCloseCode => "ws-send-invalid-close-code",
            SendError::CloseReasonTooLong => "ws-send-close-reason-too-long",
            SendError::ControlTooLong => "ws-send-control-too-long",
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())
    }
}

impl std::error::Error for SendError {}
