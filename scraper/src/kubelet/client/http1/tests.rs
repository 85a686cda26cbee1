#![allow(clippy::unwrap_used)]

use super::*;

fn head(text: &str) -> Result<Option<Head>, HeadError> {
    parse_head(text.as_bytes())
}

#[test]
fn the_request_is_a_minimal_get() {
    let mut out = Vec::new();
    let token = HeaderValue::from_static("Bearer t0k");
    request(
        &mut out,
        "/metrics/resource",
        "10.0.0.1:10250",
        Some(&token),
        false,
        false,
    );
    assert_eq!(
        out,
        b"GET /metrics/resource HTTP/1.1\r\nhost: 10.0.0.1:10250\r\nauthorization: Bearer t0k\r\n\r\n"
    );
    out.clear();
    request(&mut out, "/stats/summary?x=1", "[::1]:1", None, false, true);
    assert_eq!(
        out,
        b"GET /stats/summary?x=1 HTTP/1.1\r\nhost: [::1]:1\r\nconnection: close\r\n\r\n"
    );
    out.clear();
    request(&mut out, "/metrics/resource", "n:1", None, true, false);
    assert_eq!(
        out,
        b"GET /metrics/resource HTTP/1.1\r\nhost: n:1\r\naccept-encoding: gzip\r\n\r\n"
    );
}

#[test]
fn the_content_coding_is_gzip_identity_or_named() {
    let coding = |headers: &str| {
        head(&format!(
            "HTTP/1.1 200 OK\r\n{headers}Content-Length: 0\r\n\r\n"
        ))
        .unwrap()
        .unwrap()
        .coding
    };
    assert_eq!(coding(""), Coding::Identity);
    assert_eq!(coding("Content-Encoding: identity\r\n"), Coding::Identity);
    assert_eq!(coding("Content-Encoding: gzip\r\n"), Coding::Gzip);
    assert_eq!(coding("content-encoding:  X-GZIP \r\n"), Coding::Gzip);
    assert_eq!(coding("Content-Encoding: identity, gzip\r\n"), Coding::Gzip);
    assert_eq!(
        coding("Content-Encoding: br\r\n"),
        Coding::Other("br".into())
    );
    assert_eq!(
        coding("Content-Encoding: gzip\r\nContent-Encoding: gzip\r\n"),
        Coding::Other("gzip, gzip".into()),
        "twice compressed is not read as once"
    );
    let long = "z".repeat(500);
    match coding(&format!("Content-Encoding: {long}\r\n")) {
        Coding::Other(name) => assert_eq!(name.len(), 64, "named, but bounded"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_content_length_response() {
    let text = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\nbody";
    let h = head(text).unwrap().unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.framing, Framing::Length(1234));
    assert!(h.reusable);
    assert_eq!(&text[h.len..], "body");
}

#[test]
fn a_chunked_response_and_transfer_encoding_over_content_length() {
    let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Chunked);
    assert!(h.reusable);
    let h =
        head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .unwrap()
            .unwrap();
    assert_eq!(h.framing, Framing::Chunked);
    assert!(!h.reusable, "both framings: not reused");
    let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Close, "chunked not last: until close");
}

#[test]
fn without_framing_or_with_close_the_connection_is_not_reused() {
    let h = head("HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.framing, Framing::Close);
    assert!(!h.reusable);
    let h = head("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Length(0));
    assert!(!h.reusable);
    let h = head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!h.reusable, "HTTP/1.0 closes by default");
    let h = head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.reusable);
}

#[test]
fn status_lines() {
    let h = head("HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.status, 401);
    let h = head("HTTP/1.1 100 Continue\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.status, 100);
    assert!(matches!(
        head("HTTP/1.1 2000 OK\r\n\r\n"),
        Err(HeadError::Invalid(_))
    ));
    assert!(matches!(
        head("ICY 200 OK\r\n\r\n"),
        Err(HeadError::Invalid(_))
    ));
    assert!(matches!(
        head("<html><body>hello</body></html>\r\n\r\n"),
        Err(HeadError::Invalid(_))
    ));
}

#[test]
fn an_incomplete_head_asks_for_more() {
    assert_eq!(head(""), Ok(None));
    assert_eq!(head("HTTP/1.1 200 OK\r\nContent-Le"), Ok(None));
    assert_eq!(head("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"), Ok(None));
}

#[test]
fn bad_content_lengths_are_refused() {
    for value in ["-1", "1 2", "0x10", "", "+5", "99999999999999999999999"] {
        let text = format!("HTTP/1.1 200 OK\r\nContent-Length: {value}\r\n\r\n");
        assert!(
            matches!(head(&text), Err(HeadError::Invalid(_))),
            "{value:?}"
        );
    }
    assert!(matches!(
        head("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        Err(HeadError::Invalid(_))
    ));
    // The same value twice is accepted (RFC 9110 8.6).
    let h = head("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Length(2));
}

#[test]
fn a_huge_head_is_an_error_not_unbounded_growth() {
    // 64 KiB of headers that never end: refused once past the bound, complete or not.
    let mut text = String::from("HTTP/1.1 200 OK\r\n");
    while text.len() < 64 * 1024 {
        text.push_str(
            "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
    }
    assert_eq!(head(&text), Err(HeadError::TooLarge));
    text.push_str("\r\n");
    assert_eq!(head(&text), Err(HeadError::TooLarge));
    // One huge header line without an end.
    let line = format!("HTTP/1.1 200 OK\r\nX-Big: {}", "a".repeat(64 * 1024));
    assert_eq!(head(&line), Err(HeadError::TooLarge));
    // Too many (small) headers.
    let mut many = String::from("HTTP/1.1 200 OK\r\n");
    for i in 0..=MAX_HEADERS {
        many.push_str(&format!("X-{i}: 1\r\n"));
    }
    many.push_str("\r\n");
    assert_eq!(head(&many), Err(HeadError::TooLarge));
    // Just under the bound is fine.
    let mut fits = String::from("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n");
    fits.push_str(&format!(
        "X-Big: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES - 100)
    ));
    assert!(head(&fits).unwrap().is_some());
}

/// Decodes `input` fed in pieces of `step` bytes; returns the data and what was left after
/// the end.
fn dechunk(input: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>, bool), ChunkError> {
    let mut decoder = Chunked::default();
    let mut data = Vec::new();
    let mut left = Vec::new();
    for piece in input.chunks(step) {
        let mut rest = piece;
        while let Some(d) = decoder.next(&mut rest)? {
            data.extend_from_slice(d);
        }
        left.extend_from_slice(rest);
    }
    Ok((data, left, decoder.done()))
}

#[test]
fn chunked_bodies_decode_however_they_are_split() {
    let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
    for step in [1, 2, 3, 7, body.len()] {
        let (data, left, done) = dechunk(body, step).unwrap();
        assert_eq!(data, b"hello, world", "step {step}");
        assert!(left.is_empty());
        assert!(done);
    }
    // Upper-case hex, trailers, bytes after the end left alone.
    let (data, left, done) =
        dechunk(b"A\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nHTTP/1.1", 4).unwrap();
    assert_eq!(data, b"0123456789");
    assert_eq!(left, b"HTTP/1.1");
    assert!(done);
}

#[test]
fn an_unfinished_chunked_body_is_not_done() {
    let (data, _, done) = dechunk(b"5\r\nhel", 100).unwrap();
    assert_eq!(data, b"hel");
    assert!(!done);
    let (_, _, done) = dechunk(b"5\r\nhello\r\n0\r\n", 100).unwrap();
    assert!(!done, "the final CRLF is missing");
}

#[test]
fn bad_chunked_framing_is_an_error() {
    for bad in [
        &b"\r\n"[..],
        b"g\r\n",
        b"5\nhello",
        b"5\r\nhelloX\r\n",
        b"5\r\nhello\r\r",
        b"11111111111111111\r\n",
        b"0\r\nX: 1\n",
        b"0\r\n\rX",
        b"5;ext\n",
    ] {
        assert!(
            dechunk(bad, 100).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn hostile_chunk_lines_and_trailers_are_bounded() {
    let mut long_ext = b"5;".to_vec();
    long_ext.extend(std::iter::repeat_n(b'x', 2 * MAX_CHUNK_LINE_BYTES));
    assert!(dechunk(&long_ext, 1000).is_err());
    let mut zeros = vec![b'0'; 2 * MAX_CHUNK_LINE_BYTES];
    zeros.extend_from_slice(b"5\r\n");
    assert!(
        dechunk(&zeros, 1000).is_err(),
        "leading zeros are digits too"
    );
    let mut trailers = b"0\r\n".to_vec();
    while trailers.len() < 2 * MAX_HEAD_BYTES {
        trailers.extend_from_slice(b"X-Trailer: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert!(dechunk(&trailers, 4096).is_err());
}

#[test]
fn a_huge_chunk_size_streams_without_buffering() {
    let mut decoder = Chunked::default();
    let mut input = &b"7fffffffffffffff\r\nabc"[..];
    assert_eq!(decoder.next(&mut input).unwrap(), Some(&b"abc"[..]));
    assert_eq!(decoder.next(&mut input).unwrap(), None);
    assert!(!decoder.done());
}

#[test]
fn a_trickled_head_is_parsed_once_it_can_be_complete() {
    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    // Fed one byte at a time, the check only says yes once the blank line is in.
    let mut yes = Vec::new();
    for len in 1..=text.len() {
        if head_may_be_complete(&text[..len], len - 1) {
            yes.push(len);
        }
    }
    assert_eq!(yes, [text.len()]);
    assert!(head_may_be_complete(b"HTTP/1.1 200 OK\n\n", 0));
    assert!(head_may_be_complete(b"HTTP/1.1 200 OK\n\n", 16));
    assert!(!head_may_be_complete(b"HTTP/1.1 200 OK\r\nA: b\r\n", 0));
    assert!(head_may_be_complete(
        &vec![b'a'; MAX_HEAD_BYTES + 1],
        MAX_HEAD_BYTES
    ));
}
