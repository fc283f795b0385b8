//! A look at the frame headers of the input as it is fed, before h2 reads it, for the frames
//! that carry nothing (CVE-2019-9518: each a unit of work for nine bytes). h2 bounds some of
//! them itself, each its own way and none tunable: since 0.4.20, 100 empty DATA frames in a
//! connection's life (in a row or not, then GOAWAY ENHANCE_YOUR_CALM); empty CONTINUATION
//! frames by its count per header block; an empty HEADERS is a malformed request, counted
//! among the early resets (`Settings::max_early_resets`). This one bound covers all three,
//! whatever h2's version, and is the flag's (`--http2-max-empty-frames`).
//!
//! `Scan` walks the 9-byte frame headers (RFC 9113 §4.1) across feed boundaries, skipping the
//! client preface and every payload, and counts the frames in a row that carry nothing for a
//! message: DATA, HEADERS and CONTINUATION with an empty payload (an empty header block is
//! never a request either). A frame of those three types with a payload starts the count
//! again; others (PING, SETTINGS, WINDOW_UPDATE...) do not touch it, as they are bounded by
//! our output (`io`). Its cost: a few comparisons per frame, none per payload byte.

/// The client preface (RFC 9113 §3.4), which comes before the first frame.
const PREFACE_LEN: usize = 24;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;

#[derive(Debug)]
pub(super) struct Scan {
    /// Bytes still to pass over: the rest of the preface, or of a frame's payload.
    skip: usize,
    /// A frame header arriving in pieces.
    head: [u8; 9],
    have: usize,
    /// Empty frames in a row (see the module docs).
    empty: usize,
    max_empty: usize,
}

impl Scan {
    pub(super) fn new(max_empty: usize) -> Scan {
        Scan { skip: PREFACE_LEN, head: [0; 9], have: 0, empty: 0, max_empty }
    }

    /// Look at `data`, the next bytes of the input. `Some(n)`: the frame that ends at byte
    /// `n` of `data` is one empty frame past the bound (the rest must not be read).
    pub(super) fn scan(&mut self, data: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < data.len() {
            if self.skip > 0 {
                let n = self.skip.min(data.len() - i);
                self.skip -= n;
                i += n;
                continue;
            }
            let n = (9 - self.have).min(data.len() - i);
            self.head[self.have..self.have + n].copy_from_slice(&data[i..i + n]);
            self.have += n;
            i += n;
            if self.have < 9 {
                break;
            }
            self.have = 0;
            let h = &self.head;
            let length = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            self.skip = length;
            if !matches!(h[3], DATA | HEADERS | CONTINUATION) {
                continue;
            }
            // END_STREAM on an empty DATA frame ends a request: that is progress.
            let ends = h[3] == DATA && h[4] & 0x1 != 0;
            if length > 0 || ends {
                self.empty = 0;
                continue;
            }
            self.empty += 1;
            if self.empty > self.max_empty {
                return Some(i);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut v = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags, 0, 0, 0, 1];
        v.resize(9 + len, b'x');
        v
    }

    #[test]
    fn counts_empty_frames_in_a_row_across_pieces() {
        let mut s = Scan::new(3);
        let mut input = vec![b'P'; PREFACE_LEN];
        input.extend(frame(0x4, 0, 6)); // SETTINGS: not counted
        for _ in 0..3 {
            input.extend(frame(DATA, 0, 0));
        }
        input.extend(frame(DATA, 0, 5)); // a payload: the count starts again
        for _ in 0..3 {
            input.extend(frame(CONTINUATION, 0, 0));
        }
        input.extend(frame(DATA, 0x1, 0)); // END_STREAM: progress
        input.extend(frame(HEADERS, 0, 0));
        input.extend(frame(0x6, 0, 8)); // PING: neither counted nor a reset of the count
        input.extend(frame(DATA, 0, 0));
        input.extend(frame(DATA, 0, 0));
        let end = input.len();
        input.extend(frame(DATA, 0, 0)); // the fourth in a row
        let past = input.len();
        input.extend(frame(DATA, 0, 0));
        // Byte by byte: the same answer as at once.
        let mut one = Scan::new(3);
        assert_eq!(one.scan(&input), Some(past));
        let mut at = None;
        for (i, b) in input.iter().enumerate() {
            if let Some(n) = s.scan(std::slice::from_ref(b)) {
                at = Some(i + n);
                break;
            }
        }
        assert_eq!(at, Some(past));
        assert!(end < past);
    }
}
