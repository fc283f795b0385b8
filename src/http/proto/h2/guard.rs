//! The frame rules h2 enforces with the wrong error code, or not at all, checked on the bytes
//! before h2 reads them.
//!
//! RFC 9113 names the connection error for each rule; h2 (0.4) ends the connection on these
//! frames, but with PROTOCOL_ERROR where the RFC says FRAME_SIZE_ERROR or FLOW_CONTROL_ERROR,
//! and a client's PUSH_PROMISE without END_HEADERS makes it wait for CONTINUATION frames
//! instead of ending the connection at once (httpwg and h2spec check each). Scanning only
//! frame headers, and the payload of SETTINGS frames, costs a few comparisons per frame:
//!
//! | frame | rule | error |
//! |---|---|---|
//! | SETTINGS | ACK with a payload, or a length not a multiple of 6 (§6.5) | FRAME_SIZE_ERROR |
//! | SETTINGS | SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 (§6.5.2) | FLOW_CONTROL_ERROR |
//! | PING | a length other than 8 (§6.7) | FRAME_SIZE_ERROR |
//! | WINDOW_UPDATE, RST_STREAM | a length other than 4 (§6.9, §6.4) | FRAME_SIZE_ERROR |
//! | PRIORITY | a length other than 5 (§6.3; a connection error is allowed, §5.4) | FRAME_SIZE_ERROR |
//! | PUSH_PROMISE | sent by a client (§8.4) | PROTOCOL_ERROR |
//! | DATA, HEADERS | on a stream the client closed: its END_STREAM or RST_STREAM came (§5.1) | STREAM_CLOSED |
//! | DATA, HEADERS, CONTINUATION | empty, more than `max_empty` in a row (CVE-2019-9518) | ENHANCE_YOUR_CALM |
//!
//! The last rule is a bound h2 keeps only in part, each its own way and none tunable: since
//! 0.4.20, 100 empty DATA frames in a connection's life; empty CONTINUATION frames by its count
//! per header block; an empty HEADERS is a malformed request, counted among the early resets.
//! This one covers all three whatever h2's version (`--http2-max-empty-frames`). An empty DATA
//! with END_STREAM ends a request (progress); a frame of those three types with a payload
//! starts the count again; other frames (PING, SETTINGS...) do not touch it: our output bounds
//! their answers (`io`).
//!
//! The last needs the client's side of each stream: `Streams` keeps the highest id opened, the
//! ids the client has not ended yet, and the ranges of ids it skipped (a frame on a skipped id
//! is h2's PROTOCOL_ERROR, §5.1.1). Both lists are bounded (`MAX_OPEN`, `MAX_SKIPPED`); a
//! client that outgrows them leaves the rule to h2 (PROTOCOL_ERROR) for the rest of the
//! connection. h2 answers these frames with PROTOCOL_ERROR, or with STREAM_CLOSED only once
//! our response has closed the stream too.
//!
//! `scan` takes the bytes as fed (a frame may be split anywhere across feeds) and says how
//! many of them may go to h2: all, or those before the first frame that breaks a rule, with
//! the rule. After a violation it scans nothing more (the connection is ending).

use h2::Reason;

/// The client connection preface (RFC 9113 §3.4), which h2 checks; the frames follow it.
const PREFACE_LEN: usize = 24;
const HEADER_LEN: usize = 9;

const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// Streams the client may keep open that `Streams` follows: h2 refuses those past the
/// concurrency limit, but a client may leave them unended.
const MAX_OPEN: usize = 256;
const MAX_SKIPPED: usize = 16;
const ACK: u8 = 0x1;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame that breaks one of the rules above: the GOAWAY code and the rule, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    pub reason: Reason,
    pub rule: &'static str,
}

#[derive(Debug, Clone, Copy)]
enum Part {
    /// The preface's bytes still to come.
    Preface(usize),
    /// A frame header, `have` of its 9 bytes in `header`.
    Header { have: usize },
    /// A SETTINGS payload: `left` bytes to come, `have` bytes of the current 6-byte entry.
    Settings { left: usize, have: usize },
    /// Any other payload: `left` bytes to pass over.
    Skip { left: usize },
    /// A violation was reported: nothing more is scanned.
    Stopped,
}

/// The client's side of its streams, from the frames it sent (see the module docs).
#[derive(Debug, Default)]
struct Streams {
    /// The highest stream id a HEADERS frame opened (0: none yet).
    highest: u32,
    /// Opened and not ended by the client.
    open: Vec<u32>,
    /// Ranges of ids (first, last) passed over by a higher one: never opened.
    skipped: Vec<(u32, u32)>,
    /// Too many to follow: the rule is left to h2.
    off: bool,
    /// A header block is open (a HEADERS frame without END_HEADERS): any frame but its
    /// CONTINUATION is h2's PROTOCOL_ERROR (§6.10), not a stream-state matter.
    in_block: bool,
}

impl Streams {
    /// A DATA or HEADERS frame from the client on `id` (odd, non-zero); whether it is on a
    /// stream the client closed.
    fn on_frame(&mut self, ty: u8, flags: u8, id: u32) -> bool {
        if self.off {
            return false;
        }
        let end = flags & END_STREAM != 0;
        if let Some(i) = self.open.iter().position(|&o| o == id) {
            if end {
                self.open.swap_remove(i);
            }
            return false;
        }
        if id > self.highest {
            // A new stream (DATA on it is h2's: an idle stream). The ids between are skipped.
            if ty == HEADERS {
                let first = if self.highest == 0 { 1 } else { self.highest + 2 };
                if id > first {
                    self.skipped.push((first, id - 2));
                }
                self.highest = id;
                if !end {
                    self.open.push(id);
                }
                self.off = self.open.len() > MAX_OPEN || self.skipped.len() > MAX_SKIPPED;
            }
            return false;
        }
        !self.skipped.iter().any(|&(a, b)| (a..=b).contains(&id))
    }
}

#[derive(Debug)]
pub struct Guard {
    part: Part,
    header: [u8; HEADER_LEN],
    entry: [u8; 6],
    streams: Streams,
    /// Empty DATA/HEADERS/CONTINUATION frames in a row, and their bound.
    empty: usize,
    max_empty: usize,
}

impl Guard {
    pub fn new(max_empty: usize) -> Guard {
        Guard {
            part: Part::Preface(PREFACE_LEN),
            header: [0; HEADER_LEN],
            entry: [0; 6],
            streams: Streams::default(),
            empty: 0,
            max_empty,
        }
    }

    /// Scan `data`, the next bytes fed: `Ok(())` if they may all go to h2, else how many may
    /// (those before the offending frame's header) and the rule it broke.
    pub fn scan(&mut self, data: &[u8]) -> Result<(), (usize, Violation)> {
        let mut i = 0;
        // Where the frame being scanned began in `data` (0 if it began in an earlier feed:
        // those bytes are h2's already, and the violation then stops at the start of `data`).
        let mut frame_start = 0;
        while i < data.len() {
            match self.part {
                Part::Stopped => return Ok(()),
                Part::Preface(left) => {
                    let n = left.min(data.len() - i);
                    i += n;
                    self.part = if n == left { Part::Header { have: 0 } } else { Part::Preface(left - n) };
                }
                Part::Header { have } => {
                    if have == 0 {
                        frame_start = i;
                    }
                    let n = (HEADER_LEN - have).min(data.len() - i);
                    self.header[have..have + n].copy_from_slice(&data[i..i + n]);
                    i += n;
                    if have + n < HEADER_LEN {
                        self.part = Part::Header { have: have + n };
                        continue;
                    }
                    if let Some(v) = self.check_header() {
                        self.part = Part::Stopped;
                        return Err((frame_start, v));
                    }
                    let len = self.len();
                    self.part = match self.header[3] {
                        SETTINGS if len > 0 => Part::Settings { left: len, have: 0 },
                        _ if len > 0 => Part::Skip { left: len },
                        _ => Part::Header { have: 0 },
                    };
                }
                Part::Skip { left } => {
                    let n = left.min(data.len() - i);
                    i += n;
                    self.part = if n == left { Part::Header { have: 0 } } else { Part::Skip { left: left - n } };
                }
                Part::Settings { mut left, mut have } => {
                    while i < data.len() && left > 0 {
                        self.entry[have] = data[i];
                        have += 1;
                        left -= 1;
                        i += 1;
                        if have == 6 {
                            have = 0;
                            let id = u16::from_be_bytes([self.entry[0], self.entry[1]]);
                            let value = u32::from_be_bytes([self.entry[2], self.entry[3], self.entry[4], self.entry[5]]);
                            if id == SETTINGS_INITIAL_WINDOW_SIZE && value > MAX_WINDOW {
                                self.part = Part::Stopped;
                                let v = Violation {
                                    reason: Reason::FLOW_CONTROL_ERROR,
                                    rule: "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                                };
                                return Err((frame_start, v));
                            }
                        }
                    }
                    self.part = if left == 0 { Part::Header { have: 0 } } else { Part::Settings { left, have } };
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        usize::from(self.header[0]) << 16 | usize::from(self.header[1]) << 8 | usize::from(self.header[2])
    }

    fn check_header(&mut self) -> Option<Violation> {
        let len = self.len();
        let ty = self.header[3];
        let id = u32::from_be_bytes([self.header[5], self.header[6], self.header[7], self.header[8]]) & MAX_WINDOW;
        let flags = self.header[4];
        let in_block = self.streams.in_block;
        self.streams.in_block = match ty {
            HEADERS | CONTINUATION => flags & END_HEADERS == 0,
            _ => false,
        };
        if !in_block && (ty == DATA || ty == HEADERS) && id % 2 == 1 && self.streams.on_frame(ty, flags, id) {
            return Some(Violation { reason: Reason::STREAM_CLOSED, rule: "DATA or HEADERS on a stream the client closed" });
        }
        if matches!(ty, DATA | HEADERS | CONTINUATION) {
            if len > 0 || (ty == DATA && flags & END_STREAM != 0) {
                self.empty = 0;
            } else {
                self.empty += 1;
                if self.empty > self.max_empty {
                    return Some(Violation { reason: Reason::ENHANCE_YOUR_CALM, rule: "too many empty frames in a row" });
                }
            }
        }
        let size = |rule| Some(Violation { reason: Reason::FRAME_SIZE_ERROR, rule });
        match self.header[3] {
            SETTINGS if self.header[4] & ACK != 0 && len != 0 => size("SETTINGS ACK with a payload"),
            SETTINGS if len % 6 != 0 => size("SETTINGS length not a multiple of 6"),
            PING if len != 8 => size("PING length not 8"),
            WINDOW_UPDATE if len != 4 => size("WINDOW_UPDATE length not 4"),
            RST_STREAM if len != 4 => size("RST_STREAM length not 4"),
            PRIORITY if len != 5 => size("PRIORITY length not 5"),
            PUSH_PROMISE => Some(Violation { reason: Reason::PROTOCOL_ERROR, rule: "PUSH_PROMISE from a client" }),
            RST_STREAM if id % 2 == 1 => {
                // The client ended its side: a DATA or HEADERS after it is STREAM_CLOSED.
                if let Some(i) = self.streams.open.iter().position(|&o| o == id) {
                    self.streams.open.swap_remove(i);
                }
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The verdict on `bytes` fed whole, checked against every split into two feeds: the same
    /// rule, and h2 gets the bytes before the offending frame (plus, when the split falls
    /// inside that frame, what of it came in the first feed: an incomplete frame h2 never
    /// acts on).
    fn verdict(bytes: &[u8]) -> Option<(usize, Violation)> {
        let expected = Guard::new(100).scan(bytes).err();
        for cut in 0..=bytes.len() {
            let mut g = Guard::new(100);
            let got = match g.scan(&bytes[..cut]) {
                Err(e) => Some(e),
                Ok(()) => g.scan(&bytes[cut..]).err().map(|(n, v)| (n + cut, v)),
            };
            match (expected, got) {
                (None, None) => {}
                (Some((at, v)), Some((n, w))) => {
                    assert_eq!(v, w, "cut at {cut}");
                    assert!(n == at || (n == cut && cut > at), "cut at {cut}: {n} bytes passed, not {at}");
                }
                _ => panic!("cut at {cut}: {got:?}, not {expected:?}"),
            }
        }
        expected
    }

    #[test]
    fn valid_frames_pass_whole_and_split() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0, 0, 3, 0, 0, 0, 100]));
        bytes.extend(frame(SETTINGS, ACK, 0, &[]));
        bytes.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
        bytes.extend(frame(PING, 0, 0, &[0; 8]));
        bytes.extend(frame(HEADERS, 0x4, 1, &[0x83, 0x86, 0x84]));
        bytes.extend(frame(DATA, END_STREAM, 1, b"body"));
        bytes.extend(frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16]));
        bytes.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
        bytes.extend(frame(0xfa, 0, 0, b"unknown type"));
        assert_eq!(verdict(&bytes), None);
    }

    #[test]
    fn each_rule_names_its_code_and_stops_before_the_frame() {
        let cases: [(Vec<u8>, Reason); 8] = [
            (frame(SETTINGS, ACK, 0, &[0; 6]), Reason::FRAME_SIZE_ERROR),
            (frame(SETTINGS, 0, 0, &[0; 5]), Reason::FRAME_SIZE_ERROR),
            (frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0, 0, 4, 0x80, 0, 0, 0]), Reason::FLOW_CONTROL_ERROR),
            (frame(PING, 0, 0, &[0; 6]), Reason::FRAME_SIZE_ERROR),
            (frame(WINDOW_UPDATE, 0, 0, &[0; 3]), Reason::FRAME_SIZE_ERROR),
            (frame(RST_STREAM, 0, 1, &[0; 3]), Reason::FRAME_SIZE_ERROR),
            (frame(PRIORITY, 0, 1, &[0; 4]), Reason::FRAME_SIZE_ERROR),
            (frame(PUSH_PROMISE, 0, 1, &[0, 0, 0, 2, 0x88]), Reason::PROTOCOL_ERROR),
        ];
        for (bad, reason) in cases {
            let mut bytes = PREFACE.to_vec();
            bytes.extend(frame(SETTINGS, 0, 0, &[]));
            let at = bytes.len();
            bytes.extend(&bad);
            bytes.extend(frame(PING, 0, 0, &[0; 8]));
            let (n, v) = verdict(&bytes).expect("a violation");
            assert_eq!((n, v.reason), (at, reason), "{}", v.rule);
        }
    }

    fn handshake() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[]));
        bytes
    }

    #[test]
    fn frames_on_a_stream_the_client_closed_are_stream_closed() {
        const EH: u8 = 0x4; // END_HEADERS
        let after = |first: Vec<u8>, then: Vec<u8>| {
            let mut bytes = handshake();
            bytes.extend(first);
            let at = bytes.len();
            bytes.extend(then);
            (at, verdict(&bytes))
        };
        // HEADERS with END_STREAM, then DATA or HEADERS on it.
        for then in [frame(DATA, 0, 1, b"x"), frame(HEADERS, EH | END_STREAM, 1, &[0x82])] {
            let (at, v) = after(frame(HEADERS, EH | END_STREAM, 1, &[0x82]), then);
            assert_eq!(v.map(|(n, v)| (n, v.reason)), Some((at, Reason::STREAM_CLOSED)));
        }
        // DATA with END_STREAM, and the client's RST_STREAM, end it too.
        let mut body = frame(HEADERS, EH, 3, &[0x83]);
        body.extend(frame(DATA, END_STREAM, 3, b"x"));
        let (at, v) = after(body, frame(DATA, 0, 3, b"y"));
        assert_eq!(v.map(|(n, v)| (n, v.reason)), Some((at, Reason::STREAM_CLOSED)));
        let mut reset = frame(HEADERS, EH, 5, &[0x83]);
        reset.extend(frame(RST_STREAM, 0, 5, &[0, 0, 0, 8]));
        let (at, v) = after(reset, frame(HEADERS, EH, 5, &[0x82]));
        assert_eq!(v.map(|(n, v)| (n, v.reason)), Some((at, Reason::STREAM_CLOSED)));
    }

    #[test]
    fn open_streams_skipped_ids_and_new_ids_are_left_to_h2() {
        const EH: u8 = 0x4;
        let mut bytes = handshake();
        // 1 open (no END_STREAM): its body, trailers, a CONTINUATION are fine.
        bytes.extend(frame(HEADERS, EH, 1, &[0x83]));
        bytes.extend(frame(DATA, 0, 1, b"x"));
        bytes.extend(frame(HEADERS, EH | END_STREAM, 1, &[0x40]));
        // 7 skips 3 and 5: a HEADERS on 3 is h2's (PROTOCOL_ERROR), as is DATA on idle 9.
        bytes.extend(frame(HEADERS, EH | END_STREAM, 7, &[0x82]));
        bytes.extend(frame(HEADERS, EH | END_STREAM, 3, &[0x82]));
        bytes.extend(frame(DATA, 0, 9, b"x"));
        // Even ids are h2's too.
        bytes.extend(frame(DATA, 0, 2, b"x"));
        // Inside a header block (no END_HEADERS yet) any frame but CONTINUATION is h2's
        // PROTOCOL_ERROR, even a DATA on the stream the block's END_STREAM closes.
        bytes.extend(frame(HEADERS, END_STREAM, 11, &[0x82]));
        bytes.extend(frame(DATA, 0, 11, b"x"));
        assert_eq!(verdict(&bytes), None);
    }

    #[test]
    fn a_client_that_leaves_too_many_streams_open_is_left_to_h2() {
        let mut g = Guard::new(100);
        let mut bytes = handshake();
        for i in 0..=MAX_OPEN as u32 {
            bytes.extend(frame(HEADERS, 0x4, 2 * i + 1, &[0x83]));
        }
        bytes.extend(frame(DATA, END_STREAM, 1, b"x"));
        bytes.extend(frame(DATA, 0, 1, b"x"));
        assert_eq!(g.scan(&bytes), Ok(()));
        assert!(g.streams.open.len() <= MAX_OPEN + 1);
    }

    #[test]
    fn counts_empty_frames_in_a_row_across_pieces() {
        let mut input = PREFACE.to_vec();
        input.extend(frame(SETTINGS, 0, 0, &[0; 6])); // not counted
        for _ in 0..3 {
            input.extend(frame(DATA, 0, 1, b""));
        }
        input.extend(frame(DATA, 0, 1, b"abcde")); // a payload: the count starts again
        for _ in 0..3 {
            input.extend(frame(CONTINUATION, 0, 1, b""));
        }
        input.extend(frame(DATA, END_STREAM, 3, b"")); // END_STREAM: progress
        input.extend(frame(HEADERS, 0, 5, b""));
        input.extend(frame(PING, 0, 0, &[0; 8])); // neither counted nor a reset of the count
        input.extend(frame(DATA, 0, 5, b""));
        input.extend(frame(DATA, 0, 5, b""));
        let fourth = input.len();
        input.extend(frame(DATA, 0, 5, b"")); // the fourth in a row
        input.extend(frame(DATA, 0, 5, b""));
        let calm = Violation { reason: Reason::ENHANCE_YOUR_CALM, rule: "too many empty frames in a row" };
        assert_eq!(Guard::new(3).scan(&input), Err((fourth, calm)));
        // Byte by byte: the same frame.
        let mut g = Guard::new(3);
        let at = input.iter().enumerate().find_map(|(i, b)| g.scan(std::slice::from_ref(b)).err().map(|(n, v)| (i + n, v)));
        assert_eq!(at, Some((fourth + HEADER_LEN - 1, calm)));
    }

    #[test]
    fn nothing_is_scanned_after_a_violation() {
        let mut g = Guard::new(100);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(PING, 0, 0, &[0; 7]));
        assert!(g.scan(&bytes).is_err());
        assert_eq!(g.scan(&frame(PING, 0, 0, &[0; 7])), Ok(()));
    }
}
