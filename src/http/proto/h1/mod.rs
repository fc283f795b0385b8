//! Sans-I/O HTTP/1.1, server side: bytes in, events out; response heads in, bytes out.
//!
//! The contract with the I/O layer (`src/http/conn.rs`), one `Conn` per connection:
//! ```text
//! conn.feed(&bytes) / conn.feed_eof()         what the socket gave (copied into the buffer)
//! loop { match conn.poll()? {                 what to do next
//!     Head(h)   => start the app (h: method, target, path, query, headers, framing, ...)
//!     Continue  => out += encode::CONTINUE    (only once the app asked for the body)
//!     Data(b)   => body bytes for the app (a slice of the receive buffer: zero-copy)
//!     End       => the body is complete
//!     NeedData  => read more if conn.wants_read()
//!     Paused    => the request is read; wait for the app's response
//!     Upgraded | Closed
//! } }
//! let mut r = conn.response(&mut out, status)?;  r.header(name, value)?;  r.end(body_len, &stamp)?;
//! conn.write_body(&mut out, data)?;  conn.end_response(&mut out)? -> KeepAlive | Close | Upgrade
//! on Err(e) from poll: conn.write_error(&mut out, e.status(), &stamp), log e.rule(), close
//! ```
//! The I/O layer polls for body only when the application asks for it: that is both the
//! back-pressure (unread body stays in the buffer and `wants_read()` turns false) and the
//! moment `Expect: 100-continue` is answered. `phase()` tells which timeout to run.
//!
//! Rooms (h11's pipeline of small modules): `scan` finds where a head ends, a byte at a time
//! and once; `head` parses it (httparse) and applies the rules httparse leaves to us;
//! `decode` frames the body; `conn` is the state machine; `encode` writes responses; `date`
//! caches the `date` header; `error` names every rule. Nothing here knows sockets, rings or
//! Python, and nothing names `crate::`: the fuzz crate includes this folder by path.
//!
//! Speed: in steady state a request allocates nothing (the receive buffer, the field index and
//! the caller's output vector are reused, httparse's slots are on the stack), heads and bodies
//! are returned as slices of the receive buffer, and a small GET costs one scan of its head,
//! one httparse pass and a few compares per field. perf on a loop that parses a wrk-like GET
//! and writes a 13-byte 200 (date and server included) put httparse at about 30% of it, the
//! head scanner at 16% (after making it skip eight bytes at a time; it was 20% byte by byte),
//! `Conn::poll`'s own bookkeeping at 22%, and the writer at about 15%.

// Until src/http/conn.rs uses it, most of this (and the re-exports below) is only reached from
// the tests and the fuzz crate.
#![allow(dead_code, unused_imports)]

pub mod conn;
pub mod date;
pub mod decode;
pub mod encode;
pub mod error;
pub mod head;
mod scan;
mod syntax;

#[cfg(any(test, fuzzing))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use conn::{After, Conn, Event, Phase, Response};
pub use date::{DateCache, Stamp};
pub use encode::CONTINUE;
pub use error::{EncodeError, Error};
pub use head::{Framing, Head, Method, Version};

/// The limits a request must keep, each with its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The request line, without its CRLF (and any empty lines before it): 414 past this.
    /// 8 KiB, as nginx's `large_client_header_buffers` line.
    pub max_request_line: usize,
    /// The field section after the request line, its final CRLF included; also bounds a
    /// trailer section: 431 past this. 16 KiB, as h11's and Node's head limit.
    pub max_header_bytes: usize,
    /// Field lines in the head (and in trailers): 431 past this. Capped at
    /// `head::MAX_HEADERS_CAP` (256). 100, as hyper.
    pub max_headers: usize,
    /// The request body: 413 past this (on the Content-Length at once, on chunked as the chunk
    /// sizes add up). `None`: no limit, as uvicorn.
    pub max_body: Option<u64>,
    /// Unconsumed bytes at which `wants_read()` says stop reading the socket.
    pub max_buffered: usize,
    /// The most request body bytes read and dropped to keep a connection whose response ended
    /// before its body was read; more than that and the connection closes instead.
    pub max_drain: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request_line: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_body: None,
            max_buffered: 64 * 1024,
            max_drain: 64 * 1024,
        }
    }
}
