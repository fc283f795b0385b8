//! The frame format of RFC 6455 §5.2, shared by the reader and the writer:
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-------+-+-------------+-------------------------------+
//! |F|R|R|R| opcode|M| Payload len |    Extended payload length    |
//! |I|S|S|S|  (4)  |A|     (7)     |             (16/64)           |
//! |N|V|V|V|       |S|             |   (if payload len==126/127)   |
//! | |1|2|3|       |K|             |                               |
//! +-+-+-+-+-------+-+-------------+ - - - - - - - - - - - - - - - +
//! |     Extended payload length continued, if payload len == 127  |
//! + - - - - - - - - - - - - - - - +-------------------------------+
//! |                               |Masking-key, if MASK set to 1  |
//! +-------------------------------+-------------------------------+
//! ```
//! `parse_head` reads a head from however many bytes have arrived and judges the first two
//! bytes as soon as they are there: a reserved opcode or an unmasked frame fails before its
//! length is known, which is both "fail fast" and what makes every split of the input give the
//! same verdict. Rules that need the connection's state (fragmentation, RSV1 with deflate) are
//! the reader's (`decode`).

use super::error::Error;

/// Frame opcodes (§5.2); the reserved ones never get past `parse_head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCode {
    Continuation = 0x0,
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

impl OpCode {
    pub const fn from_u8(b: u8) -> Option<OpCode> {
        match b {
            0x0 => Some(OpCode::Continuation),
            0x1 => Some(OpCode::Text),
            0x2 => Some(OpCode::Binary),
            0x8 => Some(OpCode::Close),
            0x9 => Some(OpCode::Ping),
            0xA => Some(OpCode::Pong),
            _ => None,
        }
    }

    /// Close, ping and pong (opcodes with the high bit set, §5.5).
    pub const fn is_control(self) -> bool {
        self as u8 & 0x8 != 0
    }
}

/// The longest control payload (§5.5).
pub const MAX_CONTROL: usize = 125;

/// The longest head: 2 bytes, a 64-bit length, a 4-byte mask.
pub const MAX_HEAD: usize = 14;

/// A parsed frame head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub fin: bool,
    pub rsv1: bool,
    pub opcode: OpCode,
    /// The masking key; `None` for an unmasked frame (only a client may read one of those).
    pub mask: Option<[u8; 4]>,
    pub len: u64,
    /// The head's size in bytes (2 to 14).
    pub size: usize,
}

/// Parse a head from the start of `buf`. `Ok(None)`: more bytes are needed (and those given
/// broke no rule yet). `require_mask`: the reader is a server (§5.1).
pub fn parse_head(buf: &[u8], require_mask: bool) -> Result<Option<Head>, Error> {
    let (b0, b1) = match buf {
        [b0, b1, ..] => (*b0, *b1),
        _ => return Ok(None),
    };
    if b0 & 0x30 != 0 {
        return Err(Error::ReservedBits);
    }
    let opcode = OpCode::from_u8(b0 & 0x0f).ok_or(Error::ReservedOpcode)?;
    let fin = b0 & 0x80 != 0;
    let rsv1 = b0 & 0x40 != 0;
    let masked = b1 & 0x80 != 0;
    if require_mask && !masked {
        return Err(Error::UnmaskedFrame);
    }
    let len7 = b1 & 0x7f;
    if opcode.is_control() {
        if !fin {
            return Err(Error::FragmentedControl);
        }
        if len7 as usize > MAX_CONTROL {
            return Err(Error::ControlTooLong);
        }
        if rsv1 {
            return Err(Error::UnexpectedRsv1);
        }
    }
    let ext = match len7 {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let size = 2 + ext + if masked { 4 } else { 0 };
    if buf.len() < 2 + ext {
        return Ok(None);
    }
    let len = match ext {
        2 => u64::from(u16::from_be_bytes([buf[2], buf[3]])),
        8 => {
            let mut b = [0; 8];
            b.copy_from_slice(&buf[2..10]);
            let len = u64::from_be_bytes(b);
            // §5.2: "the most significant bit MUST be 0". Shorter encodings of small lengths
            // are allowed (the RFC says "minimal number of bytes" for senders only).
            if len >> 63 != 0 {
                return Err(Error::LengthOverflow);
            }
            len
        }
        _ => u64::from(len7),
    };
    if buf.len() < size {
        return Ok(None);
    }
    let mask = masked.then(|| [buf[size - 4], buf[size - 3], buf[size - 2], buf[size - 1]]);
    Ok(Some(Head { fin, rsv1, opcode, mask, len, size }))
}

/// XOR `data` with `mask`, `offset` bytes into the frame's payload (the mask repeats every 4
/// bytes, so a payload unmasked in pieces needs the position of each piece). Eight bytes at a
/// time: the unaligned u64 loads and stores compile to plain moves, with no `unsafe` here.
pub fn apply_mask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    let rot = (offset % 4) as usize;
    let key = [mask[rot], mask[(rot + 1) % 4], mask[(rot + 2) % 4], mask[(rot + 3) % 4]];
    let wide = u64::from_ne_bytes([key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // Every chunk was 8 bytes, a multiple of 4: the tail starts at key[0] again.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

/// Whether a close code may appear in a close frame (§7.4): 1000-1003, 1007-1014 (1012-1014
/// were registered with IANA after the RFC), 3000-4999 (libraries and applications). 1004 is
/// reserved, 1005, 1006 and 1015 are for reporting only, the rest is unassigned.
pub const fn close_code_valid(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_in_pieces_equals_mask_whole() {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let data: Vec<u8> = (0..100u8).collect();
        let mut whole = data.clone();
        apply_mask(&mut whole, mask, 0);
        for (i, b) in whole.iter().enumerate() {
            assert_eq!(*b, data[i] ^ mask[i % 4]);
        }
        for cut in [1, 3, 7, 9, 50] {
            let mut pieces = data.clone();
            let (a, b) = pieces.split_at_mut(cut);
            apply_mask(a, mask, 0);
            apply_mask(b, mask, cut as u64);
            assert_eq!(pieces, whole, "cut {cut}");
        }
    }

    #[test]
    fn heads_need_their_bytes() {
        // A masked 16-bit length frame: 2 + 2 + 4 bytes of head.
        let buf = [0x82, 0xfe, 0x01, 0x00, 1, 2, 3, 4];
        for n in 0..buf.len() {
            assert_eq!(parse_head(&buf[..n], true), Ok(None), "{n}");
        }
        let h = parse_head(&buf, true).unwrap().unwrap();
        assert_eq!((h.fin, h.opcode, h.len, h.size, h.mask), (true, OpCode::Binary, 256, 8, Some([1, 2, 3, 4])));
        // The first byte alone is not judged; the first two are, at once.
        assert_eq!(parse_head(&[0x83], true), Ok(None));
        assert_eq!(parse_head(&[0x83, 0x80], true), Err(Error::ReservedOpcode));
        assert_eq!(parse_head(&[0x81, 0x05], true), Err(Error::UnmaskedFrame));
        assert_eq!(parse_head(&[0x81, 0x05], false).unwrap().unwrap().len, 5);
    }

    #[test]
    fn a_non_minimal_length_is_accepted_and_the_top_bit_is_not() {
        let mut buf = vec![0x82, 0xff, 0, 0, 0, 0, 0, 0, 0, 5, 9, 9, 9, 9];
        assert_eq!(parse_head(&buf, true).unwrap().unwrap().len, 5);
        buf[2] = 0x80;
        assert_eq!(parse_head(&buf, true), Err(Error::LengthOverflow));
        // Known before the mask arrives.
        assert_eq!(parse_head(&buf[..10], true), Err(Error::LengthOverflow));
    }

    #[test]
    fn close_codes() {
        for ok in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999] {
            assert!(close_code_valid(ok), "{ok}");
        }
        for bad in [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535] {
            assert!(!close_code_valid(bad), "{bad}");
        }
    }
}
