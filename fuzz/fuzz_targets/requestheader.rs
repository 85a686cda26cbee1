//! Front-proxy headers: `apiserver::auth::requestheader::{HeaderNames, read_user, clear}`
//! (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-*` and the configured alternatives),
//! and `Impersonate-*` headers: `apiserver::auth::impersonation`.
//!
//! Input, as lines: `@user A,B`, `@uid A`, `@group A`, `@extra P1,P2` configure the header
//! names (kube-apiserver's standard names when none is given); every other line is a header,
//! `name: value`, with any bytes in the value.
//!
//! Beyond "no panic": a user exists exactly when a username header has a non-empty first
//! value, and it is the first such one in the configured order; groups are every non-empty
//! group value in order; every extra key comes from a header under a configured prefix
//! (verbatim when it has no `%` escape) and carries all of that header's values; after
//! `clear` no identity header is left, no user can be read, and every other header is kept.
//! Impersonation: requests exist only with a non-empty `Impersonate-User` (else an error when
//! other impersonation headers are there), the user comes first, one request per group and
//! extra value; the impersonated user is the named one, in `system:authenticated` or
//! `system:unauthenticated`; after `strip` nothing is requested and every other header is
//! kept.

#![no_main]

use apiserver::auth::impersonation::{self, Request};
use apiserver::auth::requestheader::{HeaderNames, clear, read_user};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

fn list(s: &str) -> Vec<String> {
    s.split(',').map(str::to_owned).collect()
}

/// What `HeaderNames::new` promises to keep of a name list: trimmed, valid header names.
fn valid_names(list: &[String]) -> Vec<HeaderName> {
    list.iter()
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

fn lossy(v: &HeaderValue) -> String {
    String::from_utf8_lossy(v.as_bytes()).into_owned()
}

fuzz_target!(|data: &[u8]| {
    let mut config: [Option<Vec<String>>; 4] = Default::default();
    let mut headers = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"@")
            && let Ok(rest) = std::str::from_utf8(rest)
            && let Some((key, value)) = rest.split_once(' ')
        {
            let slot = match key {
                "user" => 0,
                "uid" => 1,
                "group" => 2,
                "extra" => 3,
                _ => continue,
            };
            config[slot] = Some(list(value));
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }

    let standard = || {
        [
            vec!["x-remote-user".to_owned()],
            vec!["x-remote-uid".to_owned()],
            vec!["x-remote-group".to_owned()],
            vec!["x-remote-extra-".to_owned()],
        ]
    };
    let configured = config.iter().any(Option::is_some);
    let [user_names, uid_names, group_names, prefixes] = if configured {
        config.map(Option::unwrap_or_default)
    } else {
        standard()
    };
    let names = if configured {
        HeaderNames::new(&user_names, &uid_names, &group_names, &prefixes)
    } else {
        HeaderNames::standard()
    };
    let (user_names, uid_names, group_names) = (
        valid_names(&user_names),
        valid_names(&uid_names),
        valid_names(&group_names),
    );
    let prefixes: Vec<String> = prefixes
        .iter()
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty())
        .collect();

    let first_value = |names: &[HeaderName]| {
        names
            .iter()
            .filter_map(|n| headers.get(n))
            .map(lossy)
            .find(|v| !v.is_empty())
    };
    let user = read_user(&headers, &names);
    match (&user, first_value(&user_names)) {
        (None, None) => {}
        (Some(u), Some(name)) => {
            assert_eq!(u.name, name);
            assert_eq!(u.uid, first_value(&uid_names).unwrap_or_default());
            let groups: Vec<String> = group_names
                .iter()
                .flat_map(|n| headers.get_all(n))
                .map(lossy)
                .filter(|v| !v.is_empty())
                .collect();
            assert_eq!(u.groups, groups);

            let under_prefix: Vec<(&HeaderName, &str)> = headers
                .keys()
                .flat_map(|h| {
                    prefixes
                        .iter()
                        .filter_map(move |p| h.as_str().strip_prefix(p.as_str()).map(|r| (h, r)))
                })
                .collect();
            let values: usize = under_prefix
                .iter()
                .map(|(h, _)| headers.get_all(*h).iter().count())
                .sum();
            assert_eq!(u.extra.values().map(Vec::len).sum::<usize>(), values);
            assert!(u.extra.values().all(|v| !v.is_empty()));
            for (_, rest) in &under_prefix {
                if !rest.contains('%') {
                    assert!(u.extra.contains_key(*rest), "extra key {rest:?} missing");
                }
            }
        }
        (got, want) => panic!("read_user gave {got:?}, the first username value is {want:?}"),
    }

    let identity = |h: &HeaderName| {
        user_names.contains(h)
            || uid_names.contains(h)
            || group_names.contains(h)
            || prefixes.iter().any(|p| h.as_str().starts_with(p.as_str()))
    };
    let others = headers.iter().filter(|(h, _)| !identity(h)).count();
    let mut cleared = headers.clone();
    clear(&mut cleared, &names);
    assert_eq!(read_user(&cleared, &names), None, "a user after clear");
    assert!(
        cleared.keys().all(|h| !identity(h)),
        "an identity header after clear"
    );
    assert_eq!(cleared.len(), others, "clear removed other headers");

    check_impersonation(&headers);
});

fn check_impersonation(headers: &HeaderMap) {
    let asks = |h: &HeaderName| {
        matches!(
            h.as_str(),
            "impersonate-user" | "impersonate-group" | "impersonate-uid"
        ) || h.as_str().starts_with("impersonate-extra-")
    };
    let user = headers
        .get("impersonate-user")
        .map(lossy)
        .filter(|u| !u.is_empty());
    match impersonation::requests(headers) {
        Err(_) => assert!(user.is_none(), "an error with a user"),
        Ok(requests) if requests.is_empty() => {
            assert!(user.is_none());
            assert!(
                !headers
                    .keys()
                    .any(|h| h == "impersonate-group"
                        || h.as_str().starts_with("impersonate-extra-")),
                "groups or extras without requests"
            );
            assert!(headers.get("impersonate-uid").is_none_or(|v| v.is_empty()));
        }
        Ok(requests) => {
            let user = user.expect("requests without a user");
            let named = match &requests[0] {
                Request::User(name) => name.clone(),
                Request::ServiceAccount { namespace, name } => {
                    format!("system:serviceaccount:{namespace}:{name}")
                }
                other => panic!("{other:?} first"),
            };
            assert_eq!(named, user);
            let groups = requests
                .iter()
                .filter(|r| matches!(r, Request::Group(_)))
                .count();
            assert_eq!(groups, headers.get_all("impersonate-group").iter().count());
            let extras = requests
                .iter()
                .filter(|r| matches!(r, Request::Extra { .. }))
                .count();
            let extra_values: usize = headers
                .keys()
                .filter(|h| h.as_str().starts_with("impersonate-extra-"))
                .map(|h| headers.get_all(h).iter().count())
                .sum();
            assert_eq!(extras, extra_values);
            for r in &requests {
                let _ = r.attributes();
            }
            let impersonated = impersonation::user(&requests);
            assert_eq!(impersonated.name, user);
            assert!(
                impersonated
                    .groups
                    .iter()
                    .any(|g| g == "system:authenticated" || g == "system:unauthenticated"),
                "{impersonated:?}"
            );
        }
    }
    let others = headers.iter().filter(|(h, _)| !asks(h)).count();
    let mut stripped = headers.clone();
    impersonation::strip(&mut stripped);
    assert!(
        !stripped.keys().any(asks),
        "an impersonation header after strip"
    );
    assert_eq!(stripped.len(), others, "strip removed other headers");
}
