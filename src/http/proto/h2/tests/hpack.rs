//! HPACK against RFC 7541's own examples: Appendix C.3 (requests without Huffman coding) and
//! C.4 (the same requests with it). Each example's three header blocks go as HEADERS frames on
//! streams 1, 3 and 5 of one connection, so the dynamic table the first fills is what the
//! second and third refer to (`be`, `bf` are dynamic-table indexes 62 and 63).

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A decoded request: method, scheme, path, authority, and the fields.
type Decoded<'a> = (&'a [u8], &'a [u8], &'a [u8], &'a [u8], &'a [(&'a [u8], &'a [u8])]);

/// Feed the three blocks and check each request.
fn check(blocks: [&str; 3]) {
    let expected: [Decoded<'_>; 3] = [
        (b"GET", b"http", b"/", b"www.example.com", &[]),
        (b"GET", b"http", b"/", b"www.example.com", &[(b"cache-control", b"no-cache")]),
        (b"GET", b"https", b"/index.html", b"www.example.com", &[(b"custom-key", b"custom-value")]),
    ];
    let mut r = Raw::new(&Settings::default());
    for (i, (b, want)) in blocks.iter().zip(expected).enumerate() {
        let id = 1 + 2 * i as u32;
        assert_eq!(
            r.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &hex(b))),
            [Event::Request { id }],
            "block {i}"
        );
        let h = r.c.head(id).unwrap();
        let got = (h.method(), h.scheme().unwrap(), h.path(), h.authority().unwrap());
        assert_eq!(got, (want.0, want.1, want.2, want.3), "block {i}");
        assert_eq!(h.fields().iter().collect::<Vec<_>>(), want.4, "block {i}");
        assert_eq!(h.framing(), Framing::None);
    }
    assert_eq!(r.goaway(), None);
}

#[test]
fn rfc7541_c3_requests_without_huffman() {
    check([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn rfc7541_c4_requests_with_huffman() {
    check([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

#[test]
fn a_bad_index_is_a_compression_error() {
    // Index 70 with an empty dynamic table: RFC 7541 §2.3.3, a decoding error, which RFC 9113
    // §4.3 makes a connection error of type COMPRESSION_ERROR.
    let mut r = Raw::new(&Settings::default());
    let evs = r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x82, 0x86, 0x84, 0xc6]));
    assert!(matches!(evs.last(), Some(Event::Closed { error: Some(_) })), "{evs:?}");
    assert!(matches!(r.goaway(), Some((0, Reason::COMPRESSION_ERROR | Reason::PROTOCOL_ERROR))), "{:?}", r.goaway());
}
