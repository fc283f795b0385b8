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

#[derive(Debug)]
pub struct Guard {
    part: Part,
    header: [u8; HEADER_LEN],
    entry: [u8; 6],
}

impl Default for Guard {
    fn default() -> Guard {
        Guard { part: Part::Preface(PREFACE_LEN), header: [0; HEADER_LEN], entry: [0; 6] }
    }
}

impl Guard {
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

    fn check_header(&self) -> Option<Violation> {
        let len = self.len();
        let size = |rule| Some(Violation { reason: Reason::FRAME_SIZE_ERROR, rule });
        match self.header[3] {
            SETTINGS if self.header[4] & ACK != 0 && len != 0 => size("SETTINGS ACK with a payload"),
            SETTINGS if len % 6 != 0 => size("SETTINGS length not a multiple of 6"),
            PING if len != 8 => size("PING length not 8"),
            WINDOW_UPDATE if len != 4 => size("WINDOW_UPDATE length not 4"),
            RST_STREAM if len != 4 => size("RST_STREAM length not 4"),
            PRIORITY if len != 5 => size("PRIORITY length not 5"),
            PUSH_PROMISE => Some(Violation { reason: Reason::PROTOCOL_ERROR, rule: "PUSH_PROMISE from a client" }),
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
        let expected = Guard::default().scan(bytes).err();
        for cut in 0..=bytes.len() {
            let mut g = Guard::default();
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
        bytes.extend(frame(0x1, 0x5, 1, &[0x82, 0x86, 0x84]));
        bytes.extend(frame(0x0, 0x1, 1, b"body"));
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

    #[test]
    fn nothing_is_scanned_after_a_violation() {
        let mut g = Guard::default();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(PING, 0, 0, &[0; 7]));
        assert!(g.scan(&bytes).is_err());
        assert_eq!(g.scan(&frame(PING, 0, 0, &[0; 7])), Ok(()));
    }
}
