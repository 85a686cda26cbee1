//! Content negotiation: `Accept` (`apiserver::api::accept`: JSON, YAML, protobuf, Table,
//! PartialObjectMetadata or 406) and `Accept-Encoding` (`apiserver::serve::gzip::accept::
//! Accepts`: identity, gzip when large, gzip only).
//!
//! The input is the `Accept` value; its lines are also the `Accept-Encoding` lines.
//!
//! Beyond "no panic": media ranges come out sorted by preference with no `q` left among the
//! parameters; a Table is never protobuf; each endpoint only yields its own targets; the
//! resource, JSON-only and Status negotiations agree with one another; the gzip decision does
//! not depend on element order, on how elements are spread over lines, or on ASCII case,
//! needs a `gzip`/`*` element to pick gzip, and reads a `HeaderMap` as it reads the strings.

#![no_main]

use apiserver::api::accept::{
    Endpoint, Format, Target, negotiate, negotiate_resource, negotiate_status, parse,
};
use apiserver::serve::gzip::accept::Accepts;
use http::header::{ACCEPT_ENCODING, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

fn check_accept(h: &str) {
    let ranges = parse(h);
    for w in ranges.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(a.q.total_cmp(&b.q).is_ge(), "{h:?}: not sorted by q");
        if a.q.total_cmp(&b.q).is_eq() {
            assert!(
                a.typ != "*" || b.typ == "*",
                "{h:?}: a wildcard type before a concrete one"
            );
        }
    }
    for r in &ranges {
        assert!(!r.typ.contains('/') && !r.subtype.contains('/'));
        assert!(
            r.params.iter().all(|(k, _)| *k != "q"),
            "{h:?}: q kept as a parameter"
        );
    }

    let header = Some(h);
    let resource = negotiate_resource(header);
    let json_only = negotiate(header, Endpoint::Resource);
    let plain = negotiate(header, Endpoint::Plain);
    let discovery = negotiate(header, Endpoint::AggregatedDiscovery);
    let status = negotiate_status(header);

    if let Some((format, target)) = resource {
        assert!(
            !matches!(target, Target::DiscoveryV2),
            "{h:?}: discovery on a resource"
        );
        if matches!(target, Target::Table(_)) {
            assert_ne!(format, Format::Protobuf, "{h:?}: a Table in protobuf");
        }
        if target == Target::Object {
            // No earlier range carried options, so the Status takes the same serializer.
            assert_eq!(status, format, "{h:?}");
        }
        if format == Format::Json {
            assert_eq!(json_only, Some(target), "{h:?}");
        }
    } else {
        assert_eq!(
            json_only, None,
            "{h:?}: JSON acceptable but the resource 406s"
        );
    }
    if json_only.is_some() {
        assert!(resource.is_some());
    }
    assert!(
        matches!(plain, None | Some(Target::Object)),
        "{h:?}: {plain:?}"
    );
    assert!(
        matches!(discovery, None | Some(Target::DiscoveryV2)),
        "{h:?}: {discovery:?}"
    );
    if h.is_empty() {
        assert_eq!(resource, Some((Format::Json, Target::Object)));
        assert_eq!(discovery, None);
    }
}

fn check_accept_encoding(s: &str) {
    let lines: Vec<&str> = s.split('\n').collect();
    let decided = Accepts::parse(lines.iter().copied());

    // Elements spread over lines or joined in one: the same.
    let joined = lines.join(",");
    assert_eq!(Accepts::parse([joined.as_str()]), decided, "{s:?}");
    // Order does not matter (a repeated coding keeps its highest weight).
    let mut elements: Vec<&str> = joined.split(',').collect();
    elements.reverse();
    assert_eq!(
        Accepts::parse(elements.iter().copied()),
        decided,
        "{s:?} reversed"
    );
    // Codings and the `q` name are case-insensitive.
    let upper = joined.to_ascii_uppercase();
    assert_eq!(
        Accepts::parse([upper.as_str()]),
        decided,
        "{s:?} in upper case"
    );
    // Nothing names gzip: no gzip.
    let lower = joined.to_ascii_lowercase();
    if !lower.contains("gzip") && !lower.contains('*') {
        assert_eq!(decided, Accepts::Identity, "{s:?}");
    }

    // Through a HeaderMap, as requests arrive: lines that are visible ASCII are read.
    let mut headers = HeaderMap::new();
    let mut readable = Vec::new();
    for line in &lines {
        if let Ok(v) = HeaderValue::from_str(line) {
            if v.to_str().is_ok() {
                readable.push(*line);
            }
            headers.append(ACCEPT_ENCODING, v);
        }
    }
    let want = if readable.is_empty() {
        Accepts::Identity
    } else {
        Accepts::parse(readable.iter().copied())
    };
    assert_eq!(Accepts::of(&headers), want, "{s:?} through a HeaderMap");
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    check_accept(s);
    check_accept_encoding(s);
});
