//! Query string access as Go's `url.ParseQuery` + `Values.Get` see it: `&`-separated pairs,
//! `+` is a space, percent escapes decoded, pairs with `;` or bad escapes dropped, the first
//! value of a key wins.
//!
//! The one query decoder of the server: the API, authorization's attributes, load shedding's
//! request shapes and the health endpoints all read the query through it.

use std::borrow::Cow;

/// Every (key, value) pair of the raw query string, in order, decoded as `url.ParseQuery`
/// does; malformed pairs are skipped.
pub fn pairs(query: Option<&str>) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((unescape(k)?, unescape(v)?))
        })
}

/// Every value of `key` in the raw query string, in order, as [`pairs`] has them; only the
/// values of `key` are decoded, so looking for a parameter a request does not carry costs no
/// allocation whatever else it carries (an HPA's escaped label selector, say).
pub fn values<'a, 'k>(
    query: Option<&'a str>,
    key: &'k str,
) -> impl Iterator<Item = Cow<'a, str>> + use<'a, 'k> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';'))
        .filter_map(move |pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if unescape(k)? != key {
                return None;
            }
            unescape(v)
        })
}

/// The first value of `key` in the raw query string.
pub fn get<'a>(query: Option<&'a str>, key: &str) -> Option<Cow<'a, str>> {
    values(query, key).next()
}

/// `url.QueryUnescape`; `None` on a malformed escape.
pub fn unescape(s: &str) -> Option<Cow<'_, str>> {
    decode(s, true)
}

/// `url.PathUnescape` of one segment; `None` on a malformed escape.
pub fn unescape_path(s: &str) -> Option<Cow<'_, str>> {
    decode(s, false)
}

fn decode(s: &str, plus_is_space: bool) -> Option<Cow<'_, str>> {
    if !s.contains(['%', '+']) {
        return Some(Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = hex(*b.get(i + 1)?)?;
                let lo = hex(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Valid UTF-8 (nearly always) keeps its buffer; only invalid bytes cost a second one.
    Some(Cow::Owned(String::from_utf8(out).unwrap_or_else(|e| {
        String::from_utf8_lossy(e.as_bytes()).into_owned()
    })))
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Go's `Convert_Slice_string_To_bool`: present and not `0`/`false` (any case) is true.
pub fn flag(query: Option<&str>, key: &str) -> bool {
    get(query, key).is_some_and(|v| truthy(&v))
}

/// A present boolean parameter's value as Go's `Convert_Slice_string_To_bool` reads it:
/// anything but `0` and `false` (any case), the empty value included, is true.
pub fn truthy(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_are_those_of_the_key_in_order_as_pairs_has_them() {
        let q = Some("dryRun=All&labelSelector=a%3Db&dry%52un=x&dryRun=%zz&dryRun;x=1&dryRun");
        let got: Vec<String> = values(q, "dryRun").map(|v| v.into_owned()).collect();
        // The escaped key counts; a malformed value and a pair with `;` are dropped.
        assert_eq!(got, ["All", "x", ""]);
        let from_pairs: Vec<String> = pairs(q)
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(got, from_pairs);
        assert_eq!(get(q, "labelSelector").as_deref(), Some("a=b"));
        assert_eq!(get(q, "watch"), None);
        assert_eq!(values(None, "x").count(), 0);
    }

    #[test]
    fn decodes_like_go() {
        let q = Some("labelSelector=app%3Dweb%2Ctier+in+(a%2Cb)&x=1&x=2&bad=%zz&watch");
        assert_eq!(
            get(q, "labelSelector").as_deref(),
            Some("app=web,tier in (a,b)")
        );
        assert_eq!(get(q, "x").as_deref(), Some("1"));
        assert_eq!(get(q, "bad"), None);
        assert_eq!(get(q, "watch").as_deref(), Some(""));
        assert_eq!(get(None, "x"), None);
        assert_eq!(get(Some("a;b=c"), "a;b"), None);
        // Escapes of UTF-8 decode to it; bytes that are not UTF-8 become U+FFFD.
        assert_eq!(
            get(Some("v=%C3%A9t%C3%A9"), "v").as_deref(),
            Some("\u{e9}t\u{e9}")
        );
        assert_eq!(get(Some("v=a%FFb"), "v").as_deref(), Some("a\u{fffd}b"));
    }

    #[test]
    fn watch_flag() {
        assert!(flag(Some("watch=true"), "watch"));
        assert!(flag(Some("watch=1"), "watch"));
        assert!(flag(Some("watch"), "watch"));
        assert!(!flag(Some("watch=false"), "watch"));
        assert!(!flag(Some("watch=FALSE"), "watch"));
        assert!(!flag(Some("watch=0"), "watch"));
        assert!(!flag(Some("x=1"), "watch"));
    }
}
