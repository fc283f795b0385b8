//! The opening handshake: RFC 6455's sample key, every refusal with its status, subprotocols,
//! extension parsing and the permessage-deflate negotiation.

use super::extension::{negotiate, parse, Extension};
use super::*;

const KEY: &[u8] = b"dGhlIHNhbXBsZSBub25jZQ==";

fn fields<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a [u8], &'a [u8])> {
    let mut f: Vec<(&[u8], &[u8])> = vec![
        (b"Host", b"server.example.com"),
        (b"Upgrade", b"websocket"),
        (b"Connection", b"Upgrade"),
        (b"Sec-WebSocket-Key", KEY),
        (b"Sec-WebSocket-Version", b"13"),
    ];
    f.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    f
}

fn without(name: &str) -> Vec<(&'static [u8], &'static [u8])> {
    fields(&[]).into_iter().filter(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes())).collect()
}

fn ok(f: Vec<(&[u8], &[u8])>) -> Upgrade {
    check(b"GET", b"HTTP/1.1", f).unwrap()
}

fn refused(f: Vec<(&[u8], &[u8])>) -> HandshakeError {
    check(b"GET", b"HTTP/1.1", f).unwrap_err()
}

#[test]
fn rfc6455_sample_key() {
    assert_eq!(&accept_key(KEY), b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    let up = ok(fields(&[("Sec-WebSocket-Protocol", "chat, superchat"), ("Origin", "http://example.com")]));
    assert_eq!(&up.accept.unwrap(), b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    assert_eq!(up.subprotocols, [b"chat".to_vec(), b"superchat".to_vec()]);
    assert!(up.offers_subprotocol(b"chat") && !up.offers_subprotocol(b"Chat"));
    let headers: Vec<_> = up.response_headers(Some(b"chat"), None).collect();
    assert_eq!(
        headers,
        [
            (&b"upgrade"[..], &b"websocket"[..]),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            (b"sec-websocket-protocol", b"chat"),
        ]
    );
}

#[test]
fn field_names_and_token_lists_are_case_insensitive() {
    let f: Vec<(&[u8], &[u8])> = vec![
        (b"UPGRADE", b"h2c, WebSocket"),
        (b"connection", b"keep-alive"),
        (b"Connection", b"UPGRADE"),
        (b"sec-websocket-key", b" dGhlIHNhbXBsZSBub25jZQ== "),
        (b"SEC-WEBSOCKET-VERSION", b"13"),
        (b"Sec-WebSocket-Protocol", b"a"),
        (b"Sec-WebSocket-Protocol", b" , b ,"),
    ];
    let up = ok(f);
    assert_eq!(up.subprotocols, [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn refusals_name_their_rule_and_status() {
    assert_eq!(check(b"POST", b"HTTP/1.1", fields(&[])), Err(HandshakeError::MethodNotGet));
    assert_eq!(check(b"GET", b"HTTP/1.0", fields(&[])), Err(HandshakeError::VersionBelowHttp11));
    assert_eq!(refused(without("upgrade")), HandshakeError::MissingUpgradeWebsocket);
    assert_eq!(refused(without("connection")), HandshakeError::MissingConnectionUpgrade);
    let mut f = without("upgrade");
    f.push((b"Upgrade", b"websockets"));
    assert_eq!(refused(f), HandshakeError::MissingUpgradeWebsocket);
    for v in [None, Some("8"), Some("13, 8"), Some("")] {
        let mut f = without("sec-websocket-version");
        if let Some(v) = v {
            f.push((b"Sec-WebSocket-Version", v.as_bytes()));
        }
        let e = refused(f);
        assert_eq!(e, HandshakeError::UnsupportedVersion);
        assert_eq!((e.status(), e.header()), (426, Some((&b"sec-websocket-version"[..], &b"13"[..]))));
    }
    assert_eq!(refused(without("sec-websocket-key")), HandshakeError::MissingKey);
    assert_eq!(refused(fields(&[("Sec-WebSocket-Key", "AAAAAAAAAAAAAAAAAAAAAA==")])), HandshakeError::MissingKey);
    for bad in ["", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZQ==x", "dGhlIHNhbXBsZSBub25jZ===", "AAAAAAAAAAAAAAAAAAAAAAA=", "!!!!!!!!!!!!!!!!!!!!!!=="] {
        let mut f = without("sec-websocket-key");
        f.push((b"Sec-WebSocket-Key", bad.as_bytes()));
        let e = refused(f);
        assert_eq!((e, e.status()), (HandshakeError::InvalidKey, 400), "{bad}");
    }
    assert_eq!(refused(fields(&[("Sec-WebSocket-Protocol", "a b")])), HandshakeError::InvalidSubprotocol);
    assert_eq!(refused(fields(&[("Sec-WebSocket-Extensions", "permessage-deflate; =1")])), HandshakeError::InvalidExtensions);
    assert_eq!(HandshakeError::InvalidKey.rule(), "ws-invalid-key");
    assert_eq!(HandshakeError::MethodNotGet.header(), None);
}

fn ext(s: &str) -> Vec<Extension> {
    parse([s.as_bytes()]).unwrap()
}

#[test]
fn extension_lists_parse() {
    let e = ext(r#"permessage-deflate; client_max_window_bits, permessage-deflate;server_max_window_bits="10" ; x=y,, foo"#);
    assert_eq!(e.len(), 3);
    assert_eq!(e[0].params, [(b"client_max_window_bits".to_vec(), None)]);
    assert_eq!(e[1].params, [(b"server_max_window_bits".to_vec(), Some(b"10".to_vec())), (b"x".to_vec(), Some(b"y".to_vec()))]);
    assert_eq!(e[2].name, b"foo");
    assert!(parse([&b""[..], b" , "]).unwrap().is_empty());
    for bad in ["a;", "a b", "a; b=", r#"a; b="c d""#, r#"a; b="c"#, "a=b", ";a", "a; b=\"\""] {
        assert_eq!(parse([bad.as_bytes()]), Err(HandshakeError::InvalidExtensions), "{bad}");
    }
}

fn deal(offer: &str, cfg: &DeflateConfig) -> Option<(Params, String)> {
    negotiate(&ext(offer), cfg).map(|(p, v)| (p, String::from_utf8(v).unwrap()))
}

#[test]
fn permessage_deflate_negotiation() {
    let d = DeflateConfig::default();
    assert_eq!(deal("permessage-deflate", &d), Some((Params::default(), "permessage-deflate".into())));
    assert_eq!(deal("x-webkit-deflate-frame", &d), None);
    assert_eq!(deal("", &d), None);
    // Browsers' offer: client_max_window_bits without a value; we keep 15, so say nothing.
    assert_eq!(deal("permessage-deflate; client_max_window_bits", &d).unwrap().1, "permessage-deflate");
    // Both context takeover flags are granted and echoed.
    let (p, v) = deal("permessage-deflate; server_no_context_takeover; client_no_context_takeover", &d).unwrap();
    assert!(p.server_no_context_takeover && p.client_no_context_takeover);
    assert_eq!(v, "permessage-deflate; server_no_context_takeover; client_no_context_takeover");
    // An offered server_max_window_bits must be answered, no larger.
    let (p, v) = deal("permessage-deflate; server_max_window_bits=10", &d).unwrap();
    assert_eq!((p.server_max_window_bits, v.as_str()), (10, "permessage-deflate; server_max_window_bits=10"));
    let (p, _) = deal("permessage-deflate; server_max_window_bits=8", &d).unwrap();
    assert_eq!(p.server_max_window_bits, 8);
    // client_max_window_bits only when offered, limited by what the client said and by us.
    let small = DeflateConfig { client_max_window_bits: 12, server_max_window_bits: 11, client_no_context_takeover: true, ..d };
    let (p, v) = deal("permessage-deflate; client_max_window_bits=14", &small).unwrap();
    assert_eq!((p.client_max_window_bits, p.server_max_window_bits), (12, 11));
    assert_eq!(v, "permessage-deflate; client_no_context_takeover; server_max_window_bits=11; client_max_window_bits=12");
    let (p, _) = deal("permessage-deflate", &small).unwrap();
    assert_eq!(p.client_max_window_bits, 15, "not offered: the client keeps 15");
    // Invalid or repeated parameters decline that offer; the next acceptable one wins.
    for bad in [
        "server_max_window_bits=7",
        "server_max_window_bits=16",
        "server_max_window_bits=010",
        "server_max_window_bits",
        "client_max_window_bits=7",
        "server_no_context_takeover=1",
        "server_no_context_takeover; server_no_context_takeover",
        "client_max_window_bits; client_max_window_bits=9",
        "unknown_param",
    ] {
        assert_eq!(deal(&format!("permessage-deflate; {bad}"), &d), None, "{bad}");
        let (p, _) = deal(&format!("permessage-deflate; {bad}, permessage-deflate; client_no_context_takeover"), &d).unwrap();
        assert!(p.client_no_context_takeover, "{bad}");
    }
    // Through the handshake: quoted values and several field lines.
    let up = ok(fields(&[("Sec-WebSocket-Extensions", "foo"), ("Sec-WebSocket-Extensions", r#"permessage-deflate; server_max_window_bits="9""#)]));
    let (p, v) = up.negotiate_deflate(&d).unwrap();
    assert_eq!((p.server_max_window_bits, v.as_slice()), (9, &b"permessage-deflate; server_max_window_bits=9"[..]));
    assert!(up.response_headers(None, Some(&v)).any(|(n, _)| n == b"sec-websocket-extensions"));
}

#[test]
fn rfc8441_extended_connect() {
    // No Upgrade, Connection or key over HTTP/2: the version and the offers are what count.
    let f: Vec<(&[u8], &[u8])> = vec![
        (b"sec-websocket-version", b"13"),
        (b"sec-websocket-protocol", b"chat, superchat"),
        (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
    ];
    let up = check_extended_connect(b"CONNECT", f.clone()).unwrap();
    assert_eq!(up.accept, None);
    assert_eq!(up.subprotocols, [b"chat".to_vec(), b"superchat".to_vec()]);
    assert_eq!(up.extensions.len(), 1);
    // The answer (a 200) carries no Upgrade, Connection or Sec-WebSocket-Accept.
    let headers: Vec<_> = up.response_headers(Some(b"chat"), Some(b"permessage-deflate")).collect();
    assert_eq!(headers, [(&b"sec-websocket-protocol"[..], &b"chat"[..]), (b"sec-websocket-extensions", b"permessage-deflate")]);
    assert_eq!(check_extended_connect(b"GET", f.clone()), Err(HandshakeError::MethodNotConnect));
    let missing: Vec<(&[u8], &[u8])> = f[1..].to_vec();
    let e = check_extended_connect(b"CONNECT", missing).unwrap_err();
    assert_eq!((e, e.status(), e.header()), (HandshakeError::UnsupportedVersion, 426, Some((&b"sec-websocket-version"[..], &b"13"[..]))));
    let bad: Vec<(&[u8], &[u8])> = vec![(b"sec-websocket-version", b"13"), (b"sec-websocket-protocol", b"a b")];
    assert_eq!(check_extended_connect(b"CONNECT", bad), Err(HandshakeError::InvalidSubprotocol));
}
