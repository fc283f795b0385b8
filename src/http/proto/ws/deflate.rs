//! permessage-deflate (RFC 7692) once negotiated: one raw DEFLATE stream each way.
//!
//! A sender compresses a message, flushes with a sync flush (which ends the output on an empty
//! stored block, `00 00 ff ff`) and drops those four bytes; the receiver puts them back before
//! the last inflate of a message (§7.2.1, §7.2.2). With context takeover the LZ77 window runs on
//! from one message to the next; `*_no_context_takeover` resets it after every message.
//!
//! flate2 with its zlib-rs backend: `new_with_window_bits` (absent from the miniz_oxide
//! backend) gives a window smaller than 32 KiB when the peer asked for one. zlib cannot deflate
//! with an 8-bit window and makes it 9; that still honours a peer's `server_max_window_bits=8`,
//! because zlib's deflate never reaches back further than the window less 262 bytes (its
//! MIN_LOOKAHEAD), 250 bytes here. Inflating needs a window at least as large as the sender's:
//! ours is the one negotiated, and never below 9.
//!
//! The size limit is on the *decompressed* message: output grows in steps, never past the
//! limit plus one byte, and a message that would pass it fails with `MessageTooBig` (1009) as
//! soon as that byte appears (a zip bomb costs at most `max_message` bytes of memory).

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::error::Error;

/// What RFC 7692 §7.2.2 has the receiver append to every message before inflating it.
pub const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// The negotiated parameters (RFC 7692 §7.1), as the server sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// We reset our compressor after every message.
    pub server_no_context_takeover: bool,
    /// The client resets its compressor after every message (so we may reset our inflater).
    pub client_no_context_takeover: bool,
    /// Our compressor's window, 8 to 15.
    pub server_max_window_bits: u8,
    /// The client's compressor's window, 8 to 15 (15 when not negotiated).
    pub client_max_window_bits: u8,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        }
    }
}

/// zlib's range is 9..=15 (see the module doc for 8).
fn zlib_bits(bits: u8) -> u8 {
    bits.clamp(9, 15)
}

/// The receiving half: inflates the payload of compressed messages into the message buffer.
pub struct Inflater {
    /// Created on the first compressed message: a connection that never receives one never
    /// pays for the window.
    d: Option<Decompress>,
    bits: u8,
    reset: bool,
}

impl Inflater {
    pub fn new(params: &Params) -> Inflater {
        Inflater { d: None, bits: zlib_bits(params.client_max_window_bits), reset: params.client_no_context_takeover }
    }

    /// Inflate a piece of a compressed message's payload, appending to `out` (which holds the
    /// message so far); `MessageTooBig` once `out` would pass `max` bytes.
    pub fn inflate(&mut self, input: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), Error> {
        let bits = self.bits;
        let d = self.d.get_or_insert_with(|| Decompress::new_with_window_bits(false, bits));
        inflate_into(d, input, out, max)
    }

    /// The message's last payload byte was given: inflate the tail, and reset the window if
    /// the client does not keep it.
    pub fn finish(&mut self, out: &mut Vec<u8>, max: usize) -> Result<(), Error> {
        self.inflate(&TAIL, out, max)?;
        if self.reset {
            if let Some(d) = &mut self.d {
                d.reset(false);
            }
        }
        Ok(())
    }
}

fn inflate_into(d: &mut Decompress, mut input: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), Error> {
    loop {
        // Never more than one byte past the limit (enough to know), whatever capacity `out`
        // kept from an earlier message: so the output of one call, and with it the verdict,
        // does not depend on how the payload was split.
        let room = max.saturating_sub(out.len()).saturating_add(1);
        if out.len() == out.capacity() {
            out.reserve_exact(out.len().max(4096).min(room));
        }
        let len = out.len();
        let spare = out.spare_capacity_mut();
        let avail = spare.len().min(room);
        let (in0, out0) = (d.total_in(), d.total_out());
        let status = d.decompress_uninit(input, &mut spare[..avail], FlushDecompress::Sync);
        let made = (d.total_out() - out0) as usize;
        debug_assert!(made <= avail);
        // SAFETY: zlib wrote `made` bytes (its total_out advanced by that much, also when it
        // then reported an error) at the start of the `avail` bytes of spare capacity it was
        // given, so `out[len..len + made]` is initialised and within the capacity.
        unsafe { out.set_len(len + made) };
        // The limit first: the bytes inflated come before whatever broke the stream after
        // them, and a piece by piece inflate would have stopped at the limit already.
        if out.len() > max {
            return Err(Error::MessageTooBig);
        }
        let status = status.map_err(|_| Error::InvalidDeflate)?;
        input = &input[(d.total_in() - in0) as usize..];
        match status {
            // A block with BFINAL set ends the stream (RFC 7692 §7.2.3.4 allows it); what
            // follows in the message (the tail, or a new stream) goes to a fresh inflater.
            Status::StreamEnd => {
                d.reset(false);
                if input.is_empty() {
                    return Ok(());
                }
            }
            _ if input.is_empty() && made < avail => return Ok(()),
            // No progress with input left and room for output: the stream is stuck (zlib says
            // BufError); without this the loop would spin.
            _ if made == 0 && d.total_in() == in0 => return Err(Error::InvalidDeflate),
            _ => {}
        }
    }
}

/// The sending half: compresses whole messages.
pub struct Deflater {
    c: Option<Compress>,
    bits: u8,
    level: Compression,
    reset: bool,
}

impl Deflater {
    /// `level`: zlib's 0 (store) to 9 (smallest).
    pub fn new(params: &Params, level: u32) -> Deflater {
        Deflater {
            c: None,
            bits: zlib_bits(params.server_max_window_bits),
            level: Compression::new(level.min(9)),
            reset: params.server_no_context_takeover,
        }
    }

    /// Append `input` compressed, without the `00 00 ff ff` tail, to `out`.
    pub fn compress(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        let (bits, level) = (self.bits, self.level);
        let c = self.c.get_or_insert_with(|| Compress::new_with_window_bits(level, false, bits));
        let start = out.len();
        loop {
            // Incompressible data grows by 5 bytes per stored block of up to 64 KiB, plus the
            // flush: a margin of len/64 + 64 usually finishes in one call.
            if out.capacity() - out.len() < 64 {
                out.reserve(input.len() + input.len() / 64 + 64);
            }
            let in0 = c.total_in();
            // A compressor with room and a valid flush mode does not fail.
            let status = c.compress_vec(input, out, FlushCompress::Sync).expect("deflate with a valid flush");
            input = &input[(c.total_in() - in0) as usize..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            debug_assert!(status != Status::StreamEnd, "a sync flush never ends the stream");
        }
        // A sync flush ends on an empty stored block, except that zlib writes nothing at all
        // for an empty message right after a flush (nothing to do). That must still be sent as
        // 0x00 (RFC 7692 §7.2.3.6): the receiver's tail alone would be read as a stored block
        // header with a length of 0xff00, and the next message taken for its contents.
        if out.len() == start {
            out.push(0x00);
        } else {
            debug_assert!(out[start..].ends_with(&TAIL), "{:x?}", &out[start..]);
            if out[start..].ends_with(&TAIL) {
                out.truncate(out.len() - TAIL.len());
            }
        }
        if self.reset {
            c.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(params: &Params, messages: &[&[u8]]) {
        let mut tx = Deflater::new(params, 6);
        let mut rx = Inflater::new(params);
        for m in messages {
            let mut wire = Vec::new();
            tx.compress(m, &mut wire);
            let mut got = Vec::new();
            rx.inflate(&wire, &mut got, usize::MAX).unwrap();
            rx.finish(&mut got, usize::MAX).unwrap();
            assert_eq!(&got, m);
        }
    }

    #[test]
    fn roundtrips_with_every_window_and_takeover() {
        let long: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let msgs: [&[u8]; 4] = [b"Hello", b"", &long, b"Hello"];
        for bits in 8..=15 {
            for reset in [false, true] {
                let p = Params {
                    server_no_context_takeover: reset,
                    client_no_context_takeover: reset,
                    server_max_window_bits: bits,
                    client_max_window_bits: bits,
                };
                roundtrip(&p, &msgs);
            }
        }
    }

    #[test]
    fn rfc7692_hello() {
        // §7.2.3.1: "Hello" compressed is f2 48 cd c9 c9 07 00 (fixed Huffman, one block).
        let mut tx = Deflater::new(&Params::default(), 6);
        let mut wire = Vec::new();
        tx.compress(b"Hello", &mut wire);
        assert_eq!(wire, [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
        // §7.2.3.2: the second "Hello" with context takeover refers back to the first.
        let mut second = Vec::new();
        tx.compress(b"Hello", &mut second);
        assert_eq!(second, [0xf2, 0x00, 0x11, 0x00, 0x00]);
    }

    #[test]
    fn a_zip_bomb_stops_at_the_limit() {
        let mut tx = Deflater::new(&Params::default(), 9);
        let mut wire = Vec::new();
        tx.compress(&vec![0; 8 << 20], &mut wire);
        assert!(wire.len() < 16 << 10, "{}", wire.len());
        let mut rx = Inflater::new(&Params::default());
        let mut got = Vec::new();
        assert_eq!(rx.inflate(&wire, &mut got, 1 << 20), Err(Error::MessageTooBig));
        assert!(got.capacity() <= (1 << 20) + 1, "{}", got.capacity());
        // The same message within a larger limit is whole.
        let (mut rx, mut got) = (Inflater::new(&Params::default()), Vec::new());
        rx.inflate(&wire, &mut got, 8 << 20).unwrap();
        rx.finish(&mut got, 8 << 20).unwrap();
        assert_eq!(got.len(), 8 << 20);
    }

    #[test]
    fn garbage_is_invalid_deflate() {
        let mut rx = Inflater::new(&Params::default());
        let mut got = Vec::new();
        // BTYPE 11 is reserved.
        assert_eq!(rx.inflate(&[0xff, 0xff, 0xff], &mut got, 1000), Err(Error::InvalidDeflate));
    }
}
