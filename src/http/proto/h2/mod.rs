//! Sans-I/O HTTP/2, server side: bytes in, events out; responses in, bytes out. The protocol
//! itself is the `h2` crate (hyper's), driven here by the caller's loop instead of a runtime:
//! h2 reads from and writes to an in-memory transport (`io`), and its futures are polled with
//! wakers of ours (`wake`) that record which streams moved.
//!
//! The contract with the driver, one `Conn` per connection (after ALPN `h2` or the preface):
//! ```text
//! let mut c = Conn::new(&settings);
//! c.feed(&bytes) / c.feed_eof()                what the socket gave (copied in)
//! while let Some(ev) = c.poll() { match ev {   the work of one poll is bounded by what was fed
//!     Request { id }          => c.head(id): the request (a RequestHead); start the app
//!     Refused { id, rule }    => a malformed request, already reset: log the rule
//!     Data { id, data, end }  => body for the app, only once it asked: c.want_body(id)
//!     Trailers { id }         => c.trailers(id); the body is complete
//!     Writable { id }         => a stream whose send_data took less than it was given may go on
//!     Reset { id, reason }    => the stream is gone (peer's RST_STREAM, a stream error, or the
//!                                connection ended): http.disconnect; forget the id
//!     Closed { error }        => the connection is over: write the output, then close
//! }}
//! c.release(id, n)                             the app TOOK n body bytes: flow-control credit
//! c.respond(id, status, fields, end)?          the response head (HEADERS)
//! c.informational(id, 103, fields)?            an interim head (103 Early Hints)
//! let n = c.send_data(id, &bytes, end)?        takes at most what the windows allow now; the
//!                                              rest waits for Writable { id }
//! c.send_trailers(id, fields)?                 ends the response
//! c.reset(id, reason)                          RST_STREAM
//! c.graceful_shutdown() / c.abort(reason)      GOAWAY: in-flight streams finish / nothing does
//! c.send_ping() / c.ping_out()                 keep-alive: a PING of ours / its ACK not back yet
//! c.take_output(&mut out)                      the bytes to write (encodes what is queued)
//! if c.needs_poll() { poll again }             take_output may have opened send capacity
//! c.wants_read()                               back-pressure: false while input waits unread
//! ```
//! A stream lives from `Request` until its response ends (`end` on the last send, or trailers),
//! `reset`, or `Reset`: after that its id is unknown, `head(id)` is `None`, no event names it
//! (those not yet delivered go with it), and whatever of its request body still comes is h2's
//! to refuse (RST_STREAM NO_ERROR, RFC 9113 §8.1). A stream reset before its `Request` was
//! delivered is never seen at all.
//!
//! Invariants (each method keeps them; the tests and the fuzz target check them):
//! 1. Every byte fed is read by h2 during the next `poll` unless the output holds
//!    `Settings::max_pending_output` bytes not taken: then reading stops (a peer that does not
//!    read our answers cannot make us produce more), input waits, and `wants_read()` turns
//!    false past `Settings::max_buffered_input`.
//! 2. Body credit (WINDOW_UPDATE) is given only for bytes the caller `release`s, never on
//!    arrival: a stream's unread body is bounded by `initial_stream_window`, a connection's by
//!    `initial_connection_window`, whatever the application does.
//! 3. `send_data` hands h2 no more than the stream's assigned send capacity (the peer's stream
//!    and connection windows, at most `max_send_buffer` at a time): h2 never buffers a byte it
//!    could not send at once.
//! 4. `poll` polls only the streams whose wakers fired (and the connection when fed or woken):
//!    the cost of a poll does not grow with the streams that did not move.
//! 5. After `Closed`, nothing more is read and `poll` returns `None`.
//!
//! Rooms: `io` the in-memory transport, `wake` the wakers, `head` the request view and the
//! request rules h2 leaves to its caller, `guard` the frame rules h2 answers with the wrong
//! code or does not count (empty frames), `fields` response fields into h2's types, `event`
//! what `poll` returns, `stream` a stream's state and its poll, `conn` the state machine,
//! `error` every rule named. Nothing
//! here knows sockets, rings or Python, and nothing names `crate::`: the fuzz crate includes
//! this folder by path.

// Until the driver uses it, most of this is only reached from the tests and the fuzz crate.
#![allow(dead_code, unused_imports)]

pub mod conn;
pub mod error;
pub mod event;
mod fields;
mod guard;
pub mod head;
mod io;
mod stream;
mod wake;

#[cfg(any(test, fuzzing))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use bytes::Bytes;
pub use conn::Conn;
pub use error::{ConnError, Malformed, SendError};
pub use event::{Event, StreamId};
pub use h2::Reason;
pub use head::{Fields, Framing, Head, Method, RequestHead, Version};

/// What the server announces and enforces on each connection. Every limit has a default that
/// is safe on the open Internet; each says why it has the value it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams the client may have open at once (more are
    /// refused with RST_STREAM REFUSED_STREAM). 100, as RFC 9113 §6.5.2 recommends as the least,
    /// and as nginx, Go and hyper announce.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: request body bytes a stream may send before the
    /// application took any (credit comes back only with `release`). 256 KiB: four times the
    /// RFC's 64 KiB default, so one upload runs at 25 MB/s over a 10 ms round trip instead of
    /// 6.5, while a stream whose application does not read holds at most this much. (Go's
    /// server announces 1 MiB, hyper 2 MiB; nginx reads 64 KiB ahead.)
    pub initial_stream_window: u32,
    /// The connection's receive window (a WINDOW_UPDATE on stream 0 at the start): the most
    /// request body a connection holds unread across all its streams. 1 MiB: four streams at
    /// full window, and the memory bound per connection for bodies.
    pub initial_connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: 16 KiB, the protocol's default and least; larger frames save
    /// little and make every read bigger.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded request head (names, values, and 32 bytes a
    /// field, RFC 9113 §6.5.2); a larger one is answered 431 and its stream reset, the
    /// connection lives. 32 KiB, not h2's 16 MiB: everything h1 accepts (16 KiB of head, up to
    /// 100 fields, so at most 16 KiB + 100 × 32) fits, and nginx's total is 32 KiB too.
    pub max_header_list_size: u32,
    /// Streams reset by the client while still waiting in h2's accept queue; past this the
    /// connection ends with GOAWAY ENHANCE_YOUR_CALM. The Rapid Reset attack (CVE-2023-44487)
    /// opens and resets streams as fast as it can; those streams no longer count against
    /// `max_concurrent_streams`. 20, hyper's default.
    pub max_pending_accept_reset_streams: usize,
    /// Streams the client resets (or that are refused as malformed) before their response
    /// ended, less the responses that did end, past which the connection ends with GOAWAY
    /// ENHANCE_YOUR_CALM. h2's own bound above only sees resets within one read; this one sees
    /// a Rapid Reset spread over many reads, where each stream reached the application first.
    /// 100: a browser cancelling loads nets far fewer, and every completed response earns one
    /// back.
    pub max_early_resets: usize,
    /// Stream errors the client causes (h2 answers each with RST_STREAM: bad frames, flow
    /// control, malformed heads) before the connection ends with GOAWAY ENHANCE_YOUR_CALM. The
    /// attacks of 2019 (CVE-2019-9514 reset flood and kin) make the server send a frame per
    /// frame received. 1024, h2's default.
    pub max_local_error_reset_streams: usize,
    /// DATA, HEADERS and CONTINUATION frames in a row with an empty payload (no END_STREAM)
    /// past which the connection ends with GOAWAY ENHANCE_YOUR_CALM (CVE-2019-9518; `frames`).
    /// A frame of those types with a payload starts the count again. 100: no client sends
    /// more than a few in a row (Envoy allows 1), and h2 (0.4.20) allows 100 empty DATA
    /// frames per connection anyway, so a larger value only loosens HEADERS/CONTINUATION.
    pub max_empty_frames: usize,
    /// The most response body one stream may have queued inside h2 at a time (h2's
    /// `max_send_buffer_size`); `send_data` takes no more. Queued bytes are encoded at the next
    /// `take_output`, so this only needs to cover one loop iteration: 64 KiB is four full
    /// frames, and 100 streams queue at most 6.4 MiB.
    pub max_send_buffer: usize,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441): WebSocket over an HTTP/2 stream (extended
    /// CONNECT, `:protocol` in `Head::upgrade`). On, as the server serves WebSocket.
    pub enable_connect_protocol: bool,
    /// Unread input at which `wants_read()` says stop reading the socket. Input stays unread
    /// only while the output is full (invariant 1). 64 KiB, as h1's `max_buffered`.
    pub max_buffered_input: usize,
    /// Output not yet taken at which h2 stops reading input (its writes wait): what a peer that
    /// never reads can make the connection hold (and h2's own 16 KiB write buffer), beyond its
    /// streams' queued bodies. 64 KiB.
    pub max_pending_output: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_concurrent_streams: 100,
            initial_stream_window: 256 * 1024,
            initial_connection_window: 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 32 * 1024,
            max_pending_accept_reset_streams: 20,
            max_early_resets: 100,
            max_local_error_reset_streams: 1024,
            max_empty_frames: 100,
            max_send_buffer: 64 * 1024,
            enable_connect_protocol: true,
            max_buffered_input: 64 * 1024,
            max_pending_output: 64 * 1024,
        }
    }
}

impl Settings {
    /// h2's server builder with these settings, each brought into the range the protocol
    /// allows (h2's builder panics outside it).
    fn builder(&self) -> h2::server::Builder {
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        let mut b = h2::server::Builder::new();
        b.max_concurrent_streams(self.max_concurrent_streams)
            .initial_window_size(self.initial_stream_window.min(MAX_WINDOW))
            .initial_connection_window_size(self.initial_connection_window.min(MAX_WINDOW))
            .max_frame_size(self.max_frame_size.clamp(1 << 14, (1 << 24) - 1))
            .max_header_list_size(self.max_header_list_size)
            .max_pending_accept_reset_streams(self.max_pending_accept_reset_streams)
            .max_local_error_reset_streams(Some(self.max_local_error_reset_streams))
            .max_send_buffer_size(self.max_send_buffer.min(u32::MAX as usize));
        if self.enable_connect_protocol {
            b.enable_connect_protocol();
        }
        b
    }
}
