//! Frames in, messages out: the reader of a WebSocket connection.
//!
//! `Reader::decode` takes the unconsumed bytes (the caller's receive buffer, which it unmasks
//! in place) and returns how many it consumed and the next message, if one is complete:
//! ```text
//! Text(&str) | Binary(&[u8])   a whole data message, fragments joined, inflated, UTF-8 checked
//! Ping(&[u8]) | Pong(&[u8])    a control frame (may arrive between the fragments of a message)
//! Close(code, reason)          a valid close frame (code None: the payload was empty)
//! ```
//! Whole messages, not pieces: every consumer we have (ASGI's `websocket.receive`, the native
//! handlers) wants whole messages, and joining them here lets a message that is one frame,
//! unfragmented and uncompressed, and already in the buffer — the common case — be returned as
//! a slice of the receive buffer with no copy. Everything else is copied (or inflated) into the
//! reader's message buffer as its bytes arrive, so a message is never waited for in the receive
//! buffer: `max_message` bounds memory, and checks fail as early as the bytes allow:
//! - the head's rules when its first two bytes arrive (`frame::parse_head`);
//! - the size limit when a frame's length is known, before its payload (decompressed size as
//!   it is produced);
//! - UTF-8 as each piece arrives: `from_utf8` on the unchecked bytes, where an error with an
//!   `error_len()` is invalid whatever follows (1007 at once) and one without is a code point
//!   cut by the piece's end (checked again with the next piece, and invalid if the message
//!   ends there).
//!
//! A compressed message is inflated piece by piece too, and when it breaks several rules the
//! first fault in its inflated bytes is the verdict: invalid UTF-8 before the limit or before a
//! corrupt block wins over them, and the limit over a corrupt block after it — one inflate of
//! a whole payload reaches further than piece-sized ones, and must not decide differently.
//!
//! A control frame (at most 125 bytes) is waited for whole, unconsumed, then returned in place.
//! The same bytes give the same messages and the same verdict however they are split; the
//! tests and the fuzz target check it.

use super::deflate::Inflater;
use super::error::Error;
use super::frame::{apply_mask, close_code_valid, parse_head, OpCode};

/// What `decode` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    Ping(&'a [u8]),
    Pong(&'a [u8]),
    Close(Option<u16>, &'a str),
}

/// A data frame whose payload is being read.
#[derive(Debug, Clone, Copy)]
struct Frame {
    fin: bool,
    mask: Option<[u8; 4]>,
    /// Payload bytes still to come.
    left: u64,
    /// Payload bytes already read (where the mask stands).
    done: u64,
}

/// The data message being assembled in `Reader::buf`.
#[derive(Debug, Clone, Copy)]
struct Assembling {
    text: bool,
    compressed: bool,
}

/// Message buffers larger than this are dropped after their message, not kept for the next:
/// one large message should not pin its memory for the life of an idle connection.
const KEEP_CAPACITY: usize = 64 * 1024;

pub struct Reader {
    max_message: usize,
    /// A server reads masked frames only (§5.1); a client reads unmasked ones.
    server: bool,
    /// Some once permessage-deflate is negotiated: only then may RSV1 be set.
    inflater: Option<Inflater>,
    frame: Option<Frame>,
    msg: Option<Assembling>,
    /// The message so far (inflated if compressed).
    buf: Vec<u8>,
    /// How much of `buf` is known to be valid UTF-8 (text messages).
    utf8_ok: usize,
}

impl Reader {
    pub fn new(server: bool, max_message: usize, inflater: Option<Inflater>) -> Reader {
        Reader { max_message, server, inflater, frame: None, msg: None, buf: Vec::new(), utf8_ok: 0 }
    }

    /// Whether a data message has begun and not ended.
    pub fn in_message(&self) -> bool {
        self.msg.is_some()
    }

    /// Read from `input` (unconsumed bytes; unmasked in place as they are read): how many bytes
    /// were consumed, and the next message if one is complete. After an error nothing more may
    /// be read (the caller closes the connection).
    pub fn decode<'a>(&'a mut self, input: &'a mut [u8]) -> Result<(usize, Option<Message<'a>>), Error> {
        let mut pos = 0;
        loop {
            if let Some(f) = self.frame {
                let n = usize::try_from(f.left).unwrap_or(usize::MAX).min(input.len() - pos);
                if n == 0 && f.left > 0 {
                    return Ok((pos, None));
                }
                let piece = &mut input[pos..pos + n];
                if let Some(mask) = f.mask {
                    apply_mask(piece, mask, f.done);
                }
                pos += n;
                self.frame = Some(Frame { left: f.left - n as u64, done: f.done + n as u64, ..f });
                self.absorb(piece)?;
                if f.left == n as u64 {
                    self.frame = None;
                    if f.fin {
                        let msg = self.finish()?;
                        return Ok((pos, Some(msg)));
                    }
                }
                continue;
            }

            let Some(head) = parse_head(&input[pos..], self.server)? else {
                return Ok((pos, None));
            };
            let avail = input.len() - pos - head.size;
            // A head's length fits in 63 bits; on a 32-bit target a longer one is over any limit.
            let len = usize::try_from(head.len).unwrap_or(usize::MAX);
            let start = pos + head.size;
            match head.opcode {
                OpCode::Close | OpCode::Ping | OpCode::Pong => {
                    // parse_head bounded len by 125.
                    if avail < len {
                        return Ok((pos, None));
                    }
                    let payload = &mut input[start..start + len];
                    if let Some(mask) = head.mask {
                        apply_mask(payload, mask, 0);
                    }
                    let msg = control(head.opcode, payload)?;
                    return Ok((start + len, Some(msg)));
                }
                OpCode::Continuation => {
                    let Some(m) = self.msg else {
                        return Err(Error::UnexpectedContinuation);
                    };
                    if head.rsv1 {
                        return Err(Error::UnexpectedRsv1);
                    }
                    if !m.compressed && len > self.max_message.saturating_sub(self.buf.len()) {
                        return Err(Error::MessageTooBig);
                    }
                }
                OpCode::Text | OpCode::Binary => {
                    if self.msg.is_some() {
                        return Err(Error::ExpectedContinuation);
                    }
                    if head.rsv1 && self.inflater.is_none() {
                        return Err(Error::UnexpectedRsv1);
                    }
                    if !head.rsv1 && len > self.max_message {
                        return Err(Error::MessageTooBig);
                    }
                    let text = head.opcode == OpCode::Text;
                    if head.fin && !head.rsv1 && avail >= len {
                        // The whole message is here: return it in place.
                        let payload = &mut input[start..start + len];
                        if let Some(mask) = head.mask {
                            apply_mask(payload, mask, 0);
                        }
                        let msg = if text {
                            Message::Text(std::str::from_utf8(payload).map_err(|_| Error::InvalidUtf8)?)
                        } else {
                            Message::Binary(payload)
                        };
                        return Ok((start + len, Some(msg)));
                    }
                    if self.buf.capacity() > KEEP_CAPACITY {
                        self.buf = Vec::new();
                    }
                    self.buf.clear();
                    self.utf8_ok = 0;
                    self.msg = Some(Assembling { text, compressed: head.rsv1 });
                }
            }
            self.frame = Some(Frame { fin: head.fin, mask: head.mask, left: head.len, done: 0 });
            pos = start;
        }
    }

    /// A piece of a data frame's payload (unmasked) joins the message.
    fn absorb(&mut self, piece: &[u8]) -> Result<(), Error> {
        let m = self.msg.expect("a data frame belongs to a message");
        if m.compressed {
            let inflater = self.inflater.as_mut().expect("RSV1 only with deflate");
            let r = inflater.inflate(piece, &mut self.buf, self.max_message);
            self.inflated(m, r)?;
        } else {
            self.buf.extend_from_slice(piece);
        }
        if m.text {
            self.check_utf8(self.buf.len(), false)?;
        }
        Ok(())
    }

    /// After an inflate: on its error, invalid UTF-8 in the bytes inflated before it (within
    /// the limit) wins. One call may inflate what several smaller pieces would, and the first
    /// fault in the message's bytes must be the verdict however the payload was split.
    fn inflated(&mut self, m: Assembling, r: Result<(), Error>) -> Result<(), Error> {
        if let Err(e) = r {
            if m.text {
                self.check_utf8(self.buf.len().min(self.max_message), false)?;
            }
            return Err(e);
        }
        Ok(())
    }

    /// Check `buf[utf8_ok..upto]`; `end`: the message ends at `upto` (no code point may be cut).
    fn check_utf8(&mut self, upto: usize, end: bool) -> Result<(), Error> {
        match std::str::from_utf8(&self.buf[self.utf8_ok..upto]) {
            Ok(_) => self.utf8_ok = upto,
            Err(e) if e.error_len().is_none() && !end => self.utf8_ok += e.valid_up_to(),
            Err(_) => return Err(Error::InvalidUtf8),
        }
        Ok(())
    }

    /// The last frame of a data message was read.
    fn finish(&mut self) -> Result<Message<'_>, Error> {
        let m = self.msg.take().expect("a data frame belongs to a message");
        if m.compressed {
            let inflater = self.inflater.as_mut().expect("RSV1 only with deflate");
            let r = inflater.finish(&mut self.buf, self.max_message);
            self.inflated(m, r)?;
        }
        if !m.text {
            return Ok(Message::Binary(&self.buf));
        }
        self.check_utf8(self.buf.len(), true)?;
        debug_assert_eq!(self.utf8_ok, self.buf.len());
        // SAFETY: check_utf8(len, true) returned Ok, so from_utf8 accepted every byte of `buf`:
        // `buf[..utf8_ok]` piece by piece (a code point cut by a piece's end was checked again
        // whole with the next piece, since `utf8_ok` stops before it) and the rest just now.
        Ok(Message::Text(unsafe { std::str::from_utf8_unchecked(&self.buf) }))
    }
}

/// A control frame's payload, judged (§5.5.1 for close).
fn control(opcode: OpCode, payload: &[u8]) -> Result<Message<'_>, Error> {
    Ok(match opcode {
        OpCode::Ping => Message::Ping(payload),
        OpCode::Pong => Message::Pong(payload),
        _ => match payload {
            [] => Message::Close(None, ""),
            [_] => return Err(Error::CloseCodeTruncated),
            [hi, lo, reason @ ..] => {
                let code = u16::from_be_bytes([*hi, *lo]);
                if !close_code_valid(code) {
                    return Err(Error::InvalidCloseCode);
                }
                Message::Close(Some(code), std::str::from_utf8(reason).map_err(|_| Error::InvalidCloseReason)?)
            }
        },
    })
}
