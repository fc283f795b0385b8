//! The opening handshake, server side (RFC 6455 §4.2): judge an upgrade request's head and
//! compute what the 101 answer carries.
//!
//! `check` takes the method, the version and the fields as (name, value) byte pairs, so it
//! works on `h1::Head` and on anything else; it applies §4.2.1's rules in the order a client
//! most wants to hear about them, and returns every offer the application or the server has
//! to choose from: the subprotocols (the application picks one, or none: §4.2.2 says it MUST
//! be one of those offered) and the extensions (`negotiate_deflate` picks permessage-deflate).
//! What it leaves to others: `Host` (h1 checks it) and `Origin` (the application's policy).
//!
//! Over HTTP/2 (RFC 8441, `check_extended_connect`) the request is an extended CONNECT with
//! `:protocol websocket` (h2 has checked the pseudo-headers and that the server announced
//! SETTINGS_ENABLE_CONNECT_PROTOCOL): no `Upgrade`, `Connection` or `Sec-WebSocket-Key`, so no
//! `Sec-WebSocket-Accept` in the answer, which is a `200` (§5); the version, subprotocol and
//! extension rules are RFC 6455's.
//!
//! A missing `Sec-WebSocket-Version` gets 426 like a wrong one: either way the answer that
//! helps the client is the version we speak.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha1::{Digest, Sha1};

use super::deflate::Params;
use super::error::HandshakeError;
use super::extension::{self, DeflateConfig, Extension};
use super::syntax::{list_contains, trim};

/// The GUID of RFC 6455 §1.3, appended to the key before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`: base64(SHA-1(key + GUID)), always 28 bytes.
pub fn accept_key(key: &[u8]) -> [u8; 28] {
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID);
    let digest = h.finalize();
    let mut out = [0; 28];
    let n = STANDARD.encode_slice(digest, &mut out).expect("20 bytes are 28 in base64");
    debug_assert_eq!(n, 28);
    out
}

/// An upgrade request that passed every rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// The `Sec-WebSocket-Accept` value (HTTP/1.1; an extended CONNECT has none).
    pub accept: Option<[u8; 28]>,
    /// The offered subprotocols, in the client's order.
    pub subprotocols: Vec<Vec<u8>>,
    /// The offered extensions, in the client's order.
    pub extensions: Vec<Extension>,
}

/// Judge an upgrade request. `version` is the request line's, e.g. `b"HTTP/1.1"`.
pub fn check<'a>(
    method: &[u8],
    version: &[u8],
    headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Upgrade, HandshakeError> {
    if method != b"GET" {
        return Err(HandshakeError::MethodNotGet);
    }
    if version != b"HTTP/1.1" {
        return Err(HandshakeError::VersionBelowHttp11);
    }
    let mut upgrade = Vec::new();
    let mut connection = Vec::new();
    let mut versions = Vec::new();
    let mut keys = Vec::new();
    let mut protocols = Vec::new();
    let mut extensions = Vec::new();
    for (name, value) in headers {
        let list = match name.len() {
            7 if name.eq_ignore_ascii_case(b"upgrade") => &mut upgrade,
            10 if name.eq_ignore_ascii_case(b"connection") => &mut connection,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-version") => &mut versions,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-key") => &mut keys,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-protocol") => &mut protocols,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-extensions") => &mut extensions,
            _ => continue,
        };
        list.push(value);
    }
    // `Upgrade: websocket` names a protocol, not a token list of tokens only (`HTTP/2.0` has a
    // slash), so it is matched element by element rather than parsed as tokens.
    if !list_contains(upgrade.iter().copied(), b"websocket") {
        return Err(HandshakeError::MissingUpgradeWebsocket);
    }
    if !list_contains(connection.iter().copied(), b"upgrade") {
        return Err(HandshakeError::MissingConnectionUpgrade);
    }
    if !matches!(versions.as_slice(), [v] if trim(v) == b"13") {
        return Err(HandshakeError::UnsupportedVersion);
    }
    let key = match keys.as_slice() {
        [k] => trim(k),
        _ => return Err(HandshakeError::MissingKey),
    };
    // §4.1: the key is a randomly chosen 16-byte value, base64-encoded (so 24 bytes, "==").
    if key.len() != 24 || !STANDARD.decode(key).is_ok_and(|raw| raw.len() == 16) {
        return Err(HandshakeError::InvalidKey);
    }
    offers(Some(accept_key(key)), &protocols, &extensions)
}

/// The offers of a request that passed the rules before.
fn offers(accept: Option<[u8; 28]>, protocols: &[&[u8]], extensions: &[&[u8]]) -> Result<Upgrade, HandshakeError> {
    let subprotocols = extension::tokens(protocols.iter().copied()).ok_or(HandshakeError::InvalidSubprotocol)?;
    let extensions = extension::parse(extensions.iter().copied())?;
    Ok(Upgrade { accept, subprotocols: subprotocols.into_iter().map(<[u8]>::to_vec).collect(), extensions })
}

/// Judge an HTTP/2 extended CONNECT (RFC 8441 §4-5) whose `:protocol` is `websocket`: the
/// method, `Sec-WebSocket-Version: 13`, and the offers as over HTTP/1.1.
pub fn check_extended_connect<'a>(
    method: &[u8],
    headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Upgrade, HandshakeError> {
    if method != b"CONNECT" {
        return Err(HandshakeError::MethodNotConnect);
    }
    let mut versions = Vec::new();
    let mut protocols = Vec::new();
    let mut extensions = Vec::new();
    for (name, value) in headers {
        let list = match name {
            _ if name.eq_ignore_ascii_case(b"sec-websocket-version") => &mut versions,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-protocol") => &mut protocols,
            _ if name.eq_ignore_ascii_case(b"sec-websocket-extensions") => &mut extensions,
            _ => continue,
        };
        list.push(value);
    }
    if !matches!(versions.as_slice(), [v] if trim(v) == b"13") {
        return Err(HandshakeError::UnsupportedVersion);
    }
    offers(None, &protocols, &extensions)
}

impl Upgrade {
    /// Accept the first acceptable permessage-deflate offer (see `extension::negotiate`): the
    /// parameters for `Conn` and the `Sec-WebSocket-Extensions` value of the answer.
    pub fn negotiate_deflate(&self, cfg: &DeflateConfig) -> Option<(Params, Vec<u8>)> {
        extension::negotiate(&self.extensions, cfg)
    }

    /// Whether the client offered `subprotocol` (the application's choice must be one).
    pub fn offers_subprotocol(&self, subprotocol: &[u8]) -> bool {
        self.subprotocols.iter().any(|p| p == subprotocol)
    }

    /// The fields of the answer, lower-case names: over HTTP/1.1 (the 101) `upgrade`,
    /// `connection`, `sec-websocket-accept`; then the chosen subprotocol and extensions when
    /// there are.
    pub fn response_headers<'s>(
        &'s self,
        subprotocol: Option<&'s [u8]>,
        extensions: Option<&'s [u8]>,
    ) -> impl Iterator<Item = (&'static [u8], &'s [u8])> {
        let fixed = self.accept.as_ref().map(|accept| -> [(&'static [u8], &'s [u8]); 3] {
            [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"), (b"sec-websocket-accept", accept)]
        });
        fixed
            .into_iter()
            .flatten()
            .chain(subprotocol.map(|p| (&b"sec-websocket-protocol"[..], p)))
            .chain(extensions.map(|e| (&b"sec-websocket-extensions"[..], e)))
    }
}
