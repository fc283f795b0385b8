//! What `Conn::poll` hands the driver: one `Event` at a time, each naming its stream by the
//! id the client chose (odd, increasing, never reused on a connection).

use bytes::Bytes;
use h2::Reason;

use super::error::{ConnError, Malformed};

/// A stream's id, as the client chose it.
pub type StreamId = u32;

/// What `poll` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request: `Conn::head(id)`. Start the application.
    Request { id: StreamId },
    /// A request the rules refuse (`Malformed`): its stream was reset with PROTOCOL_ERROR and
    /// never reaches the application. For the log only.
    Refused { id: StreamId, rule: Malformed },
    /// Request body bytes, only after `want_body(id)`; `end`: the body is complete (the last
    /// event may carry no bytes). `release` them once the application took them.
    Data { id: StreamId, data: Bytes, end: bool },
    /// Request trailers (`Conn::trailers(id)`); the body is complete.
    Trailers { id: StreamId },
    /// Send capacity opened for a stream whose `send_data` took less than it was given.
    Writable { id: StreamId },
    /// The stream is gone: reset by the peer, by h2 for a rule the peer broke on it, or the
    /// connection ended under it. The id is unknown from now on.
    Reset { id: StreamId, reason: Reason },
    /// The connection is over: write the output, then close. `error`: why, if not cleanly
    /// (not after a graceful shutdown or the peer's EOF between frames).
    Closed { error: Option<ConnError> },
}
