//! JSON string writing with Go `encoding/json` escaping (HTML-safe, as `json.Encoder` does by
//! default, which is what the apiserver's serializer uses).

/// Bytes that need escaping in ASCII: control characters, `"`, `\`, `<`, `>`, `&`.
const fn escape_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    // Lead byte of U+2028 / U+2029, checked further when met.
    t[0xE2] = true;
    t
}

static ESCAPE: [bool; 256] = escape_table();
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether any of the 8 bytes may need escaping: a control byte, a non-ASCII byte (checked
/// one by one later), `"`, `\\`, `<`, `>` or `&`.
#[inline]
fn word_needs_care(w: u64) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let eq = |c: u8| zero_byte(w ^ (LO * u64::from(c)));
    let below_space = w.wrapping_sub(LO * 0x20) & !w & HI;
    (below_space | (w & HI) | eq(b'"') | eq(b'\\') | eq(b'<') | eq(b'>') | eq(b'&')) != 0
}

/// Whether none of `bytes` needs escaping (nor a look: non-ASCII is checked one byte at a
/// time by [`write_escaped`]). Eight bytes at a time straight from the slice, the last word
/// overlapping the one before it; strings shorter than a word byte by byte.
#[inline]
fn is_plain(bytes: &[u8]) -> bool {
    let word = |chunk: &[u8]| {
        <[u8; 8]>::try_from(chunk).map_or(true, |w| word_needs_care(u64::from_le_bytes(w)))
    };
    if bytes.len() < 8 {
        return !bytes.iter().any(|&b| ESCAPE[b as usize]);
    }
    let mut chunks = bytes.chunks_exact(8);
    if chunks.by_ref().any(word) {
        return false;
    }
    chunks.remainder().is_empty() || !word(&bytes[bytes.len() - 8..])
}

/// Writes `s` as a quoted JSON string, byte-identical to Go's `json.Marshal`.
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if is_plain(bytes) {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    write_escaped(out, bytes);
}

/// [`write_str`] of a string that may need escapes.
#[cold]
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let mut i = 0;
    let mut start = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !ESCAPE[b as usize] {
            i += 1;
            continue;
        }
        if b == 0xE2 {
            // U+2028 is E2 80 A8, U+2029 is E2 80 A9.
            if bytes.get(i + 1) == Some(&0x80) && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(if bytes[i + 2] == 0xA8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                start = i;
            } else {
                i += 1;
            }
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0C => out.extend_from_slice(b"\\f"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xF) as usize]);
            }
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    /// Reference escaper, one char at a time.
    fn serde_like(v: &str) -> String {
        let mut out = String::from("\"");
        for c in v.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '<' => out.push_str("\\u003c"),
                '>' => out.push_str("\\u003e"),
                '&' => out.push_str("\\u0026"),
                '\u{2028}' => out.push_str("\\u2028"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(s("plain-name.1"), "\"plain-name.1\"");
        assert_eq!(s("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(s("<a>&"), "\"\\u003ca\\u003e\\u0026\"");
        assert_eq!(
            s("\n\r\t\u{8}\u{c}\u{1}\u{1f}"),
            "\"\\n\\r\\t\\b\\f\\u0001\\u001f\""
        );
        assert_eq!(s("x\u{2028}y\u{2029}z"), "\"x\\u2028y\\u2029z\"");
        // Other non-ASCII (including other E2 sequences) is written raw.
        assert_eq!(s("µs – é"), "\"µs – é\"");
        assert_eq!(s(""), "\"\"");
        // Escapes found at every position of strings of every length around the 8-byte
        // words of the fast path (shorter than a word, whole words, an overlapping tail).
        let plain = "abcdefghijklmnopqrstuvwx";
        for len in 0..=plain.len() {
            assert_eq!(s(&plain[..len]), serde_like(&plain[..len]));
            for special in ['"', '\\', '<', '>', '&', '\n', '\u{1}', '\u{2028}', 'é'] {
                for pos in 0..=len {
                    let mut input = plain[..len].to_owned();
                    input.insert(pos, special);
                    let want = serde_like(&input);
                    assert_eq!(s(&input), want, "{input:?}");
                }
            }
        }
    }
}
