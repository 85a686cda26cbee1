//! `Accept-Encoding` (RFC 9110 §12.5.3): which of gzip and identity the client takes.
//!
//! k8s.io/apiserver's `negotiateContentEncoding` only looks for a bare `gzip` token; this
//! parser reads the whole grammar, so quality values count (`gzip;q=0` refuses gzip), `*`
//! stands for every coding not listed (identity included), and `identity;q=0` (or `*;q=0`
//! without an `identity` entry) refuses an unencoded body.

use http::HeaderMap;
use http::header::ACCEPT_ENCODING;

/// What a request's `Accept-Encoding` allows, for a server that has gzip and identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepts {
    /// No gzip: no header, an empty one, gzip not listed (nor `*`) or with `q=0`, or identity
    /// preferred by a higher quality.
    Identity,
    /// Gzip when the body is large enough to be worth it ([`super::THRESHOLD_BYTES`]),
    /// identity otherwise: what client-go's plain `Accept-Encoding: gzip` says.
    GzipWhenLarge,
    /// Gzip whatever the size: gzip is acceptable and identity is not.
    GzipOnly,
}

/// Quality values in thousandths (`q=0.5` is 500).
type Milli = u16;

const Q_ONE: Milli = 1000;

/// The quality given to each coding that matters here; `None` where not listed.
#[derive(Debug, Default)]
struct Weights {
    gzip: Option<Milli>,
    identity: Option<Milli>,
    any: Option<Milli>,
}

impl Weights {
    /// A repeated coding keeps its highest quality.
    fn set(slot: &mut Option<Milli>, q: Milli) {
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
}

impl Accepts {
    /// Reads every `Accept-Encoding` line of `headers` (lines that are not visible ASCII are
    /// ignored). No header at all means identity: like k8s.io/apiserver, only a client that
    /// asks gets gzip.
    pub fn of(headers: &HeaderMap) -> Accepts {
        let mut values = headers
            .get_all(ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .peekable();
        if values.peek().is_none() {
            return Accepts::Identity;
        }
        Accepts::parse(values)
    }

    /// Decides from the field values (one per header line).
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Accepts {
        let mut w = Weights::default();
        for element in values.into_iter().flat_map(|v| v.split(',')) {
            let Some((coding, q)) = element_weight(element) else {
                continue;
            };
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                // RFC 9110 §8.4.1.3: x-gzip is gzip.
                Weights::set(&mut w.gzip, q);
            } else if coding.eq_ignore_ascii_case("identity") {
                Weights::set(&mut w.identity, q);
            } else if coding == "*" {
                Weights::set(&mut w.any, q);
            }
        }
        // `*` matches every coding not listed. Identity is acceptable unless refused; it is
        // preferred only when given a higher quality than gzip, explicitly or through `*`.
        let gzip = w.gzip.or(w.any).unwrap_or(0);
        match w.identity.or(w.any) {
            // An empty header lands here too: it asks for no coding at all.
            _ if gzip == 0 => Accepts::Identity,
            Some(0) => Accepts::GzipOnly,
            Some(identity) if identity > gzip => Accepts::Identity,
            _ => Accepts::GzipWhenLarge,
        }
    }
}

/// One list element: `coding *( OWS ";" OWS name "=" value )`, the coding and its `q`
/// (1 when absent). `None` for an empty element or a malformed weight: such an element is
/// skipped, so a garbled `identity;q=x` does not refuse identity.
fn element_weight(element: &str) -> Option<(&str, Milli)> {
    let mut pieces = element.split(';');
    let coding = pieces.next()?.trim_matches([' ', '\t']);
    if coding.is_empty() {
        return None;
    }
    let mut q = Q_ONE;
    for param in pieces {
        let (name, value) = param.split_once('=')?;
        if name.trim_matches([' ', '\t']).eq_ignore_ascii_case("q") {
            q = qvalue(value.trim_matches([' ', '\t']))?;
        }
    }
    Some((coding, q))
}

/// RFC 9110 `qvalue`: `0[.ddd]` or `1[.000]`, in thousandths.
fn qvalue(s: &str) -> Option<Milli> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut milli: Milli = 0;
    for (digit, scale) in frac.bytes().zip([100, 10, 1]) {
        milli += Milli::from(digit - b'0') * scale;
    }
    match int {
        "0" => Some(milli),
        "1" if milli == 0 => Some(Q_ONE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(value: &str) -> Accepts {
        Accepts::parse([value])
    }

    #[test]
    fn plain_gzip_as_client_go_sends_it() {
        assert_eq!(accepts("gzip"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("GZIP"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("x-gzip"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("deflate, gzip, br, zstd"), Accepts::GzipWhenLarge);
        assert_eq!(accepts(" gzip ;q=1.0 "), Accepts::GzipWhenLarge);
    }

    #[test]
    fn no_header_or_no_gzip_is_identity() {
        assert_eq!(Accepts::of(&HeaderMap::new()), Accepts::Identity);
        assert_eq!(accepts(""), Accepts::Identity);
        assert_eq!(accepts("br"), Accepts::Identity);
        assert_eq!(accepts("br, zstd, deflate"), Accepts::Identity);
        assert_eq!(accepts("identity"), Accepts::Identity);
        assert_eq!(accepts("gzipx, agzip"), Accepts::Identity);
    }

    #[test]
    fn quality_values() {
        assert_eq!(accepts("gzip;q=0"), Accepts::Identity);
        assert_eq!(accepts("gzip; q=0.000"), Accepts::Identity);
        assert_eq!(accepts("gzip;Q=0.001"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("gzip;q=0.5"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("br;q=1, gzip;q=0.1"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("*;q=0.5"), Accepts::GzipWhenLarge);
        assert_eq!(accepts("*"), Accepts::GzipWhenLarge);
        // An explicit entry beats `*`.
        assert_eq!(accepts("*, gzip;q=0"), Accepts::Identity);
        assert_eq!(accepts("gzip;q=0, *"), Accepts::Identity);
        // Identity preferred.
        assert_eq!(accepts("gzip;q=0.5, identity"), Accepts::Identity);
        assert_eq!(accepts("gzip;q=0.5, *"), Accepts::Identity);
        assert_eq!(
            accepts("gzip;q=0.5, identity;q=0.5"),
            Accepts::GzipWhenLarge
        );
        assert_eq!(accepts("gzip, identity;q=0.5"), Accepts::GzipWhenLarge);
    }

    #[test]
    fn identity_refused() {
        assert_eq!(accepts("identity;q=0, gzip"), Accepts::GzipOnly);
        assert_eq!(accepts("gzip, identity;q=0"), Accepts::GzipOnly);
        assert_eq!(accepts("*;q=0, gzip"), Accepts::GzipOnly);
        assert_eq!(accepts("gzip;q=0.2, *;q=0"), Accepts::GzipOnly);
        // A more specific identity entry beats `*;q=0`.
        assert_eq!(accepts("*;q=0, identity, gzip"), Accepts::GzipWhenLarge);
        // Nothing acceptable that we have: identity anyway (the body is not refused).
        assert_eq!(accepts("*;q=0"), Accepts::Identity);
        assert_eq!(accepts("identity;q=0, br"), Accepts::Identity);
    }

    #[test]
    fn malformed_elements_are_skipped() {
        assert_eq!(accepts("gzip;q=2"), Accepts::Identity);
        assert_eq!(accepts("gzip;q=1.5"), Accepts::Identity);
        assert_eq!(accepts("gzip;q=0.1234"), Accepts::Identity);
        assert_eq!(accepts("gzip;q=abc"), Accepts::Identity);
        assert_eq!(accepts("gzip;q"), Accepts::Identity);
        assert_eq!(accepts("gzip, identity;q=x"), Accepts::GzipWhenLarge);
        assert_eq!(accepts(",, gzip ,"), Accepts::GzipWhenLarge);
        // Other parameters are ignored.
        assert_eq!(accepts("gzip;level=9"), Accepts::GzipWhenLarge);
    }

    #[test]
    fn every_header_line_counts() {
        let mut h = HeaderMap::new();
        h.append(ACCEPT_ENCODING, "br".parse().unwrap());
        h.append(ACCEPT_ENCODING, "gzip".parse().unwrap());
        assert_eq!(Accepts::of(&h), Accepts::GzipWhenLarge);
        h.append(ACCEPT_ENCODING, "identity;q=0".parse().unwrap());
        assert_eq!(Accepts::of(&h), Accepts::GzipOnly);
    }

    #[test]
    fn qvalues() {
        assert_eq!(qvalue("0"), Some(0));
        assert_eq!(qvalue("0."), Some(0));
        assert_eq!(qvalue("0.5"), Some(500));
        assert_eq!(qvalue("0.05"), Some(50));
        assert_eq!(qvalue("0.123"), Some(123));
        assert_eq!(qvalue("1"), Some(1000));
        assert_eq!(qvalue("1.000"), Some(1000));
        assert_eq!(qvalue("1.001"), None);
        assert_eq!(qvalue(".5"), None);
        assert_eq!(qvalue("-0"), None);
        assert_eq!(qvalue(""), None);
    }
}
