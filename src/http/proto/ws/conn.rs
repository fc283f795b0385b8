//! The server side of a WebSocket connection as a state machine: bytes in, messages out;
//! messages in, bytes out. No I/O, like `h1::Conn`, and driven the same way:
//! ```text
//! conn.feed(&bytes) / conn.feed_eof()
//! loop { match conn.poll(&mut out) {
//!     Ok(Text(s) | Binary(b))  => a whole message for the application
//!     Ok(Ping(p))              => informational: the pong is already in `out`
//!     Ok(Pong(p))              => an answer to our ping (keep-alive timers)
//!     Ok(Close { code, reason }) => the peer closed; our answer (if due) is in `out`
//!     Ok(NeedData)             => read more if wants_read()
//!     Ok(Closed)               => flush `out`, then close TCP; close_code() for the application
//!     Err(e)                   => the close frame with e.code() is in `out`; log e.rule(); then Closed
//! } }
//! conn.send_text(&mut out, s)?  send_binary  ping  pong  close(&mut out, Some(1000), "bye")?
//! ```
//! The close handshake (RFC 6455 §5.5.1, §7):
//! ```text
//!   Open ──close() sent──▶ CloseSent ──their close──▶ Done
//!     └────their close: answered at once (same code)──▶ Done
//!   any state ──protocol error: close(e.code()) unless ours was sent──▶ Done
//!   any state ──EOF──▶ Done (close_code 1006 unless a close was received)
//! ```
//! In `Done` the server closes the TCP connection first (§7.1.1 wants the server to), once
//! `out` is flushed; `poll` says `Closed` from then on and input is ignored. Messages that
//! arrive after our close frame are still delivered (the peer may send until it sees it); pings
//! are then not answered, since nothing may follow our close frame but the end.
//!
//! Sending: a message is compressed when permessage-deflate is in force and it is at least
//! `Config::compress_min` bytes (RFC 7692 lets each message choose), and cut into frames of
//! `Config::max_frame` bytes.

use super::decode::{Message, Reader};
use super::deflate::{Deflater, Inflater, Params};
use super::encode;
use super::error::{code, Error, SendError};
use super::frame::OpCode;

/// Per-connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The largest message accepted, after decompression: 1009 past it. 16 MiB, uvicorn's
    /// `--ws-max-size` default.
    pub max_message: usize,
    /// Unconsumed bytes at which `wants_read()` says stop reading the socket.
    pub max_buffered: usize,
    /// Outgoing messages are cut into frames of at most this many payload bytes.
    pub max_frame: usize,
    /// zlib's compression level for outgoing messages (0-9).
    pub compression_level: u32,
    /// Outgoing messages shorter than this are sent uncompressed even with deflate on: below a
    /// few dozen bytes deflate saves nothing and costs a compressor call.
    pub compress_min: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_message: 16 * 1024 * 1024,
            max_buffered: 64 * 1024,
            max_frame: usize::MAX,
            compression_level: 6,
            compress_min: 0,
        }
    }
}

/// What `poll` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    Ping(&'a [u8]),
    Pong(&'a [u8]),
    /// The peer's close frame (`code` None: it had no payload, report 1005).
    Close { code: Option<u16>, reason: &'a str },
    NeedData,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Open,
    /// Our close frame is in the output; we wait for theirs.
    CloseSent,
    /// Close TCP once the output is flushed.
    Done,
}

pub struct Conn {
    config: Config,
    /// The receive buffer, `[consumed][unconsumed]`, compacted on `feed`.
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    reader: Reader,
    deflater: Option<Deflater>,
    scratch: Vec<u8>,
    state: State,
    close_code: Option<u16>,
}

impl Conn {
    /// A connection after its 101; `deflate`: the permessage-deflate parameters negotiated.
    pub fn new(config: Config, deflate: Option<Params>) -> Conn {
        Conn {
            reader: Reader::new(true, config.max_message, deflate.as_ref().map(Inflater::new)),
            deflater: deflate.as_ref().map(|p| Deflater::new(p, config.compression_level)),
            config,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            scratch: Vec::new(),
            state: State::Open,
            close_code: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// The code to tell the application once `Done`: the peer's (1005 if its close had none),
    /// 1006 if the connection ended without a close frame received, or ours after an error.
    pub fn close_code(&self) -> Option<u16> {
        self.close_code
    }

    /// Bytes the socket gave (the bytes left over from the upgrade request first).
    pub fn feed(&mut self, data: &[u8]) {
        if self.state == State::Done {
            return;
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes fed and not consumed yet (HTTP/2 gives the peer credit for the rest).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The peer closed its side.
    pub fn feed_eof(&mut self) {
        self.eof = true;
    }

    /// Whether the I/O layer should read the socket.
    pub fn wants_read(&self) -> bool {
        self.state != State::Done && !self.eof && self.buf.len() - self.pos < self.config.max_buffered
    }

    /// The next event; answers (pong, close) go to `out`. See the module doc.
    pub fn poll(&mut self, out: &mut Vec<u8>) -> Result<Event<'_>, Error> {
        if self.state == State::Done {
            return Ok(Event::Closed);
        }
        // Fields, not methods, from here: the event borrows `reader` and `buf`.
        let (n, msg) = match self.reader.decode(&mut self.buf[self.pos..]) {
            Ok(r) => r,
            Err(e) => {
                if self.state == State::Open {
                    encode::close(out, Some(e.code()), "", None).expect("our error codes are valid");
                }
                self.state = State::Done;
                self.close_code = Some(e.code());
                return Err(e);
            }
        };
        self.pos += n;
        Ok(match msg {
            None if self.eof => {
                self.state = State::Done;
                self.close_code = Some(code::ABNORMAL);
                Event::Closed
            }
            None => Event::NeedData,
            Some(Message::Text(s)) => Event::Text(s),
            Some(Message::Binary(b)) => Event::Binary(b),
            Some(Message::Ping(p)) => {
                if self.state == State::Open {
                    encode::frame(out, true, false, OpCode::Pong, p, None);
                }
                Event::Ping(p)
            }
            Some(Message::Pong(p)) => Event::Pong(p),
            Some(Message::Close(c, reason)) => {
                if self.state == State::Open {
                    // §5.5.1: answer with a close frame, typically echoing the code.
                    encode::close(out, c, "", None).expect("a received code is a valid one");
                }
                self.state = State::Done;
                self.close_code = Some(c.unwrap_or(code::NO_STATUS));
                Event::Close { code: c, reason }
            }
        })
    }

    pub fn send_text(&mut self, out: &mut Vec<u8>, text: &str) -> Result<(), SendError> {
        self.send(out, OpCode::Text, text.as_bytes())
    }

    pub fn send_binary(&mut self, out: &mut Vec<u8>, data: &[u8]) -> Result<(), SendError> {
        self.send(out, OpCode::Binary, data)
    }

    fn send(&mut self, out: &mut Vec<u8>, opcode: OpCode, data: &[u8]) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::Closing);
        }
        match &mut self.deflater {
            Some(d) if data.len() >= self.config.compress_min => {
                self.scratch.clear();
                d.compress(data, &mut self.scratch);
                encode::message(out, opcode, true, &self.scratch, self.config.max_frame, None);
                if self.scratch.capacity() > 64 * 1024 {
                    self.scratch = Vec::new();
                }
            }
            _ => encode::message(out, opcode, false, data, self.config.max_frame, None),
        }
        Ok(())
    }

    pub fn ping(&mut self, out: &mut Vec<u8>, payload: &[u8]) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::Closing);
        }
        encode::control(out, OpCode::Ping, payload, None)
    }

    /// An unsolicited pong (a heartbeat, §5.5.3); pings are answered by `poll` already.
    pub fn pong(&mut self, out: &mut Vec<u8>, payload: &[u8]) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::Closing);
        }
        encode::control(out, OpCode::Pong, payload, None)
    }

    /// Start the close handshake. `Closing` if a close was already sent or received (the
    /// connection is ending anyway: the caller may ignore it).
    pub fn close(&mut self, out: &mut Vec<u8>, code: Option<u16>, reason: &str) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::Closing);
        }
        encode::close(out, code, reason, None)?;
        self.state = State::CloseSent;
        Ok(())
    }
}
