//! Go's `url.ParseQuery` and `url.Values.Encode`: kube-aggregator forwards
//! `req.URL.Query().Encode()`, so the backend sees keys sorted and values re-escaped.

/// Parses a raw query as Go's `url.ParseQuery`: pairs split on `&`, the first `=` splits key
/// and value, `+` is a space, `%XX` is decoded; pairs with `;` or a bad escape are dropped.
pub fn parse(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((unescape(k)?, unescape(v)?))
        })
        .collect()
}

/// Encodes as Go's `url.Values.Encode`: keys sorted (stable, so a key's values keep their
/// order), `QueryEscape` on keys and values.
pub fn encode(pairs: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    sorted
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Go's `url.QueryEscape`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's `url.QueryUnescape`; `None` on a malformed escape or invalid UTF-8.
pub fn unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reencodes_like_go() {
        let pairs = parse("labelSelector=app%3Dweb,tier+in+(a)&limit=5&a=x%20y&bad=%zz&semi;x=1");
        assert_eq!(
            encode(&pairs),
            "a=x+y&labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5"
        );
    }

    #[test]
    fn repeated_keys_keep_their_order() {
        let pairs = parse("b=2&a=1&b=1");
        assert_eq!(encode(&pairs), "a=1&b=2&b=1");
    }
}
