//! `Sec-WebSocket-Extensions` (RFC 6455 §9.1) and the permessage-deflate negotiation (RFC 7692
//! §7.1), server side.
//! ```text
//! Sec-WebSocket-Extensions = 1#extension
//! extension  = extension-token *( ";" extension-param )
//! extension-param = token [ "=" ( token / quoted-string ) ]
//! ```
//! with optional whitespace around `,`, `;` and `=`, and a quoted value that must itself be a
//! token once unquoted (§9.1). Several field lines are one list (RFC 9110 §5.3). A value that
//! does not parse is a bad request (400), as the websockets library answers.
//!
//! Negotiation: the offers are tried in the client's order of preference and the first one we
//! can accept wins (§5.1 of RFC 7692 lets the client send several, e.g. one asking for a small
//! window and a fallback). An offer with an unknown parameter, a repeated one, or a value out
//! of range is declined (§7.1: "the server MUST decline"), not the whole request.

use super::deflate::Params;
use super::error::HandshakeError;
use super::syntax::{is_tchar, trim};

/// One offered extension: its name and parameters, in order (values unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    pub name: Vec<u8>,
    pub params: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Parse every `Sec-WebSocket-Extensions` field value into one list.
pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<Extension>, HandshakeError> {
    let mut out = Vec::new();
    for v in values {
        let mut p = Parser { s: v, i: 0 };
        loop {
            p.ows();
            if p.eof() {
                break;
            }
            if p.eat(b',') {
                // Empty list elements are allowed (RFC 9110 §5.6.1).
                continue;
            }
            out.push(p.extension()?);
            p.ows();
            if !p.eof() && !p.eat(b',') {
                return Err(HandshakeError::InvalidExtensions);
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn eof(&self) -> bool {
        self.i >= self.s.len()
    }

    fn ows(&mut self) {
        while self.s.get(self.i).is_some_and(|&b| b == b' ' || b == b'\t') {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn token(&mut self) -> Result<Vec<u8>, HandshakeError> {
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&b| is_tchar(b)) {
            self.i += 1;
        }
        if self.i == start {
            return Err(HandshakeError::InvalidExtensions);
        }
        Ok(self.s[start..self.i].to_vec())
    }

    fn quoted(&mut self) -> Result<Vec<u8>, HandshakeError> {
        let mut v = Vec::new();
        loop {
            match self.s.get(self.i) {
                None => return Err(HandshakeError::InvalidExtensions),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(b'\\') => {
                    v.push(*self.s.get(self.i + 1).ok_or(HandshakeError::InvalidExtensions)?);
                    self.i += 2;
                }
                Some(&b) => {
                    v.push(b);
                    self.i += 1;
                }
            }
        }
        // §9.1: "the value MUST conform to the 'token' ABNF" once unquoted.
        if v.is_empty() || !v.iter().all(|&b| is_tchar(b)) {
            return Err(HandshakeError::InvalidExtensions);
        }
        Ok(v)
    }

    fn extension(&mut self) -> Result<Extension, HandshakeError> {
        let name = self.token()?;
        let mut params = Vec::new();
        loop {
            self.ows();
            if !self.eat(b';') {
                break;
            }
            self.ows();
            let pname = self.token()?;
            self.ows();
            let value = if self.eat(b'=') {
                self.ows();
                Some(if self.eat(b'"') { self.quoted()? } else { self.token()? })
            } else {
                None
            };
            params.push((pname, value));
        }
        Ok(Extension { name, params })
    }
}

/// What the server is willing to agree to for permessage-deflate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateConfig {
    /// Reset our compressor after every message even if the client did not ask (less memory
    /// kept per connection, worse compression).
    pub server_no_context_takeover: bool,
    /// Ask the client to reset its compressor after every message.
    pub client_no_context_takeover: bool,
    /// The largest window we compress with (8 to 15).
    pub server_max_window_bits: u8,
    /// The largest window we let the client compress with (8 to 15), when it says it can
    /// limit it.
    pub client_max_window_bits: u8,
}

impl Default for DeflateConfig {
    fn default() -> DeflateConfig {
        DeflateConfig {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        }
    }
}

/// RFC 7692 §7.1.2: `1*DIGIT`, 8 to 15, no leading zero.
fn window_bits(v: &[u8]) -> Option<u8> {
    match v {
        [d @ b'8'..=b'9'] => Some(d - b'0'),
        [b'1', d @ b'0'..=b'5'] => Some(10 + d - b'0'),
        _ => None,
    }
}

/// One permessage-deflate offer as the client made it.
#[derive(Default)]
struct Offer {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// `Some(None)`: the parameter without a value (the client can limit its window).
    client_max_window_bits: Option<Option<u8>>,
}

/// Read an offer's parameters; `None` declines it (unknown, repeated or invalid parameter).
fn offer(ext: &Extension) -> Option<Offer> {
    let mut o = Offer::default();
    for (name, value) in &ext.params {
        let value = value.as_deref();
        match name.as_slice() {
            b"server_no_context_takeover" if !o.server_no_context_takeover && value.is_none() => {
                o.server_no_context_takeover = true
            }
            b"client_no_context_takeover" if !o.client_no_context_takeover && value.is_none() => {
                o.client_no_context_takeover = true
            }
            b"server_max_window_bits" if o.server_max_window_bits.is_none() => {
                o.server_max_window_bits = Some(window_bits(value?)?)
            }
            b"client_max_window_bits" if o.client_max_window_bits.is_none() => {
                o.client_max_window_bits = Some(match value {
                    None => None,
                    Some(v) => Some(window_bits(v)?),
                })
            }
            _ => return None,
        }
    }
    Some(o)
}

/// Accept the first acceptable permessage-deflate offer: the parameters in force and the
/// `Sec-WebSocket-Extensions` value to answer with. `None`: no offer, or none acceptable.
pub fn negotiate(offers: &[Extension], cfg: &DeflateConfig) -> Option<(Params, Vec<u8>)> {
    offers.iter().filter(|e| e.name.eq_ignore_ascii_case(b"permessage-deflate")).find_map(|e| {
        let o = offer(e)?;
        let mut p = Params {
            server_no_context_takeover: o.server_no_context_takeover || cfg.server_no_context_takeover,
            client_no_context_takeover: o.client_no_context_takeover || cfg.client_no_context_takeover,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        };
        let mut resp = b"permessage-deflate".to_vec();
        if p.server_no_context_takeover {
            resp.extend_from_slice(b"; server_no_context_takeover");
        }
        if p.client_no_context_takeover {
            resp.extend_from_slice(b"; client_no_context_takeover");
        }
        // §7.1.2.1: an offered server_max_window_bits MUST be answered with a value no larger;
        // without one we may still announce a smaller window of ours.
        let server_bits = o.server_max_window_bits.unwrap_or(15).min(cfg.server_max_window_bits.clamp(8, 15));
        if o.server_max_window_bits.is_some() || server_bits < 15 {
            p.server_max_window_bits = server_bits;
            resp.extend_from_slice(format!("; server_max_window_bits={server_bits}").as_bytes());
        }
        // §7.1.2.2: client_max_window_bits may be answered only if offered; the client then
        // uses at most the value we answer.
        if let Some(offered) = o.client_max_window_bits {
            let client_bits = offered.unwrap_or(15).min(cfg.client_max_window_bits.clamp(8, 15));
            if client_bits < 15 {
                p.client_max_window_bits = client_bits;
                resp.extend_from_slice(format!("; client_max_window_bits={client_bits}").as_bytes());
            }
        }
        Some((p, resp))
    })
}

/// The token-list fields (`Upgrade`, `Connection`, `Sec-WebSocket-Protocol`): the elements of
/// every field line, trimmed, empty ones skipped. `None` if an element is not a token.
pub fn tokens<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<Vec<&'a [u8]>> {
    let mut out = Vec::new();
    for v in values {
        for item in v.split(|&b| b == b',') {
            let item = trim(item);
            if item.is_empty() {
                continue;
            }
            if !item.iter().all(|&b| is_tchar(b)) {
                return None;
            }
            out.push(item);
        }
    }
    Some(out)
}
