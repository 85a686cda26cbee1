//! Label and field selectors: `scraper::selector::{LabelSelector, FieldSelector,
//! field_requirements}`.
//!
//! Input, as lines: a label selector, a field selector, an object name, its namespace, then
//! `key=value` labels. The whole input is also parsed as either selector.
//!
//! Beyond "no panic": the selectors have no `Display`, but their authorization form
//! (`SelectorRequirement`s) is one: it is rendered back to selector syntax and must parse to
//! the same requirements (parse -> display -> parse); matching agrees with a reference
//! evaluation of those requirements (exactly without `<`/`>` terms, which authorization
//! leaves out, and as an upper bound with them); `FieldSelector::parse` accepts exactly
//! what `field_requirements` accepts on `metadata.name`/`metadata.namespace`.

#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use scraper::inventory::Labels;
use scraper::selector::{
    Field, FieldSelector, LabelSelector, SelectorRequirement, field_requirements,
};

/// Selector syntax for label requirements in authorization form.
fn render_labels(reqs: &[SelectorRequirement]) -> String {
    let terms: Vec<String> = reqs
        .iter()
        .map(|r| match r.operator {
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            other => panic!("unknown label operator {other}"),
        })
        .collect();
    terms.join(",")
}

/// apimachinery `fields.EscapeValue`.
fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Selector syntax for field requirements (always `=` for equality).
fn render_fields(reqs: &[SelectorRequirement]) -> String {
    let terms: Vec<String> = reqs
        .iter()
        .map(|r| {
            let [value] = r.values.as_slice() else {
                panic!("a field requirement with {} values", r.values.len());
            };
            let op = match r.operator {
                "In" => "=",
                "NotIn" => "!=",
                other => panic!("unknown field operator {other}"),
            };
            format!("{}{op}{}", r.key, escape_field_value(value))
        })
        .collect();
    terms.join(",")
}

fn reference_label_match(reqs: &[SelectorRequirement], labels: &Labels) -> bool {
    reqs.iter().all(|r| {
        let have = labels.get(&r.key);
        let listed = have.is_some_and(|v| r.values.iter().any(|x| x == v));
        match r.operator {
            "In" => listed,
            "NotIn" => !listed,
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => panic!("unknown label operator {other}"),
        }
    })
}

fn sorted(mut reqs: Vec<SelectorRequirement>) -> Vec<(String, &'static str, Vec<String>)> {
    let mut out: Vec<_> = reqs
        .drain(..)
        .map(|r| (r.key, r.operator, r.values))
        .collect();
    out.sort();
    out
}

fn check_label_selector(s: &str, labels: &Labels) {
    let Ok(sel) = LabelSelector::parse(s) else {
        return;
    };
    let reqs = sel.authorization_requirements();
    for r in &reqs {
        assert!(
            r.values.windows(2).all(|w| w[0] < w[1]),
            "label values not sorted and unique: {r:?}"
        );
        match r.operator {
            "In" | "NotIn" => assert!(!r.values.is_empty(), "{r:?} without values"),
            _ => assert!(r.values.is_empty(), "{r:?} with values"),
        }
    }
    assert!(
        reqs.windows(2).all(|w| w[0].key <= w[1].key),
        "requirements not sorted by key"
    );
    let rendered = render_labels(&reqs);
    let again = LabelSelector::parse(&rendered)
        .unwrap_or_else(|e| panic!("{s:?} rendered as {rendered:?} does not parse: {e}"));
    assert_eq!(
        again.authorization_requirements(),
        reqs,
        "{s:?} -> {rendered:?} changed the requirements"
    );
    if sel.is_empty() {
        assert!(sel.matches(labels));
    }
    let reference = reference_label_match(&reqs, labels);
    assert_eq!(
        again.matches(labels),
        reference,
        "{rendered:?} on {labels:?}"
    );
    if s.contains(['<', '>']) {
        // `gt`/`lt` terms are left out of authorization, which only broadens it.
        assert!(!sel.matches(labels) || reference, "{s:?} on {labels:?}");
    } else {
        assert_eq!(sel.matches(labels), reference, "{s:?} on {labels:?}");
    }
}

fn check_field_selector(s: &str, name: &str, namespace: &str) {
    let reqs = field_requirements(s);
    let parsed = FieldSelector::parse(s);
    let Ok(reqs) = reqs else {
        assert!(
            parsed.is_err(),
            "{s:?}: the grammar refused what the API took"
        );
        return;
    };
    let known = reqs
        .iter()
        .all(|r| r.key == "metadata.name" || r.key == "metadata.namespace");
    assert_eq!(parsed.is_ok(), known, "{s:?}: {parsed:?}");

    let rendered = render_fields(&reqs);
    let again = field_requirements(&rendered)
        .unwrap_or_else(|e| panic!("{s:?} rendered as {rendered:?} does not parse: {e}"));
    assert_eq!(
        sorted(again),
        sorted(reqs.clone()),
        "{s:?} -> {rendered:?} changed the requirements"
    );

    let Ok(sel) = parsed else {
        return;
    };
    assert_eq!(sel.is_empty(), reqs.is_empty());
    let reference = reqs.iter().all(|r| {
        let have = if r.key == "metadata.name" {
            name
        } else {
            namespace
        };
        (have == r.values[0]) == (r.operator == "In")
    });
    assert_eq!(sel.matches(name, namespace), reference, "{s:?}");
    for (field, key) in [
        (Field::Name, "metadata.name"),
        (Field::Namespace, "metadata.namespace"),
    ] {
        let has_equality = |v: &str| {
            reqs.iter()
                .any(|r| r.key == key && r.operator == "In" && r.values[0] == v)
        };
        match sel.required(field) {
            Some(v) => assert!(has_equality(v), "{s:?}: required {key} = {v:?}"),
            None => assert!(
                !reqs.iter().any(|r| r.key == key && r.operator == "In"),
                "{s:?}: an equality on {key} is not reported"
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = s.split('\n');
    let label_selector = lines.next().unwrap_or("");
    let field_selector = lines.next().unwrap_or("");
    let name = lines.next().unwrap_or("");
    let namespace = lines.next().unwrap_or("");
    let map: BTreeMap<&str, &str> = lines
        .map(|l| l.split_once('=').unwrap_or((l, "")))
        .collect();
    let pairs: Vec<(Arc<str>, Arc<str>)> = map
        .into_iter()
        .map(|(k, v)| (Arc::from(k), Arc::from(v)))
        .collect();
    let labels = Labels::from(pairs);

    check_label_selector(label_selector, &labels);
    check_field_selector(field_selector, name, namespace);
    check_label_selector(s, &labels);
    check_field_selector(s, name, namespace);
});
