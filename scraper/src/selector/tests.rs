use std::sync::Arc;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut v: Vec<(Arc<str>, Arc<str>)> = pairs
        .iter()
        .map(|(k, v)| (Arc::from(*k), Arc::from(*v)))
        .collect();
    v.sort();
    Labels::from(v)
}

fn sel(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn parse_err(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(v) => panic!("{s:?} parsed as {v:?}"),
        Err(e) => e.0,
    }
}

#[test]
fn empty_and_blank_select_everything() {
    for s in ["", "   ", "\t\n"] {
        let l = sel(s);
        assert!(l.is_empty());
        assert!(l.matches(&labels(&[])));
        assert!(l.matches(&labels(&[("a", "b")])));
    }
}

#[test]
fn equality_operators() {
    let ab = labels(&[("a", "b"), ("x", "y")]);
    let ac = labels(&[("a", "c")]);
    let none = labels(&[]);
    for s in ["a=b", "a==b", " a = b ", "a in (b)", "a in (z,b)"] {
        let l = sel(s);
        assert!(l.matches(&ab), "{s}");
        assert!(!l.matches(&ac), "{s}");
        assert!(!l.matches(&none), "{s}");
    }
    for s in ["a!=b", "a notin (b)", "a notin (b,z)"] {
        let l = sel(s);
        assert!(!l.matches(&ab), "{s}");
        assert!(l.matches(&ac), "{s}");
        assert!(l.matches(&none), "{s} matches when the key is absent");
    }
}

#[test]
fn exists_and_does_not_exist() {
    let with = labels(&[("app", "web")]);
    let without = labels(&[("tier", "db")]);
    assert!(sel("app").matches(&with));
    assert!(!sel("app").matches(&without));
    assert!(!sel("!app").matches(&with));
    assert!(sel("!app").matches(&without));
    assert!(sel("!app,tier").matches(&without));
    assert!(!sel("app,tier").matches(&with));
}

#[test]
fn empty_values_and_keywords_as_values() {
    let empty = labels(&[("a", "")]);
    assert!(sel("a=").matches(&empty));
    assert!(sel("a in ()").matches(&empty));
    assert!(sel("a in (,x)").matches(&empty));
    // `in` and `notin` are plain identifiers in value position.
    let kw = labels(&[("a", "in")]);
    assert!(sel("a=in").matches(&kw));
    assert!(sel("a in (notin, in)").matches(&kw));
}

#[test]
fn greater_and_less_than() {
    let l = labels(&[("n", "5"), ("s", "x")]);
    assert!(sel("n>4").matches(&l));
    assert!(!sel("n>5").matches(&l));
    assert!(sel("n<6").matches(&l));
    assert!(!sel("s>1").matches(&l), "non-integer label never matches");
    assert!(!sel("missing<1").matches(&l));
}

#[test]
fn prefixed_keys() {
    let l = labels(&[("app.kubernetes.io/name", "web")]);
    assert!(sel("app.kubernetes.io/name=web").matches(&l));
    assert!(sel("app.kubernetes.io/name in (web, api)").matches(&l));
}

#[test]
fn syntax_errors_use_apimachinery_wording() {
    assert_eq!(
        parse_err("a=b c"),
        "found 'c', expected: ',' or 'end of string'"
    );
    assert_eq!(
        parse_err("a=b,"),
        "found '', expected: identifier after ','"
    );
    assert_eq!(
        parse_err("=a"),
        "found '=', expected: !, identifier, or 'end of string'"
    );
    assert_eq!(
        parse_err("a b"),
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    );
    assert_eq!(
        parse_err("a in b"),
        "unable to parse requirement: found 'b' expected: '('"
    );
    assert_eq!(
        parse_err("a in (b"),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    assert_eq!(
        parse_err("a in (b c)"),
        "unable to parse requirement: found 'c', expected: ',' or ')'"
    );
    assert_eq!(
        parse_err("a in (=)"),
        "unable to parse requirement: found '=', expected: ',', ')' or identifier"
    );
    assert_eq!(
        parse_err("a=(b)"),
        "unable to parse requirement: found '(', expected: identifier"
    );
    assert_eq!(
        parse_err("!a=b"),
        "found '=', expected: ',' or 'end of string'"
    );
    assert_eq!(
        parse_err("!"),
        "unable to parse requirement: found '', expected: identifier"
    );
}

#[test]
fn invalid_keys_and_values_use_validation_wording() {
    assert_eq!(
        parse_err("-a=b"),
        "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    );
    assert_eq!(
        parse_err("Example.com/a=b"),
        "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    assert!(parse_err("a/b/c").contains("a qualified name must consist of"));
    assert!(parse_err(&"k".repeat(64)).contains("name part must be no more than 63 characters"));
    assert_eq!(
        parse_err("a=b$"),
        "unable to parse requirement: values[0][a]: Invalid value: \"b$\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
    assert_eq!(
        parse_err("a>x"),
        "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
    );
    // Several errors are aggregated in brackets.
    assert!(
        parse_err("a in (-x,-y)")
            .starts_with("unable to parse requirement: [values[0][a]: Invalid value: \"-x\"")
    );
}

#[test]
fn field_selector_name_and_namespace() {
    let f = FieldSelector::parse("metadata.name=n1").unwrap();
    assert!(f.matches("n1", ""));
    assert!(!f.matches("n2", ""));
    let f = FieldSelector::parse("metadata.namespace==kube-system,metadata.name!=x").unwrap();
    assert!(f.matches("y", "kube-system"));
    assert!(!f.matches("x", "kube-system"));
    assert!(!f.matches("y", "default"));
    assert_eq!(f.required(Field::Namespace), Some("kube-system"));
    assert_eq!(f.required(Field::Name), None);
    assert!(FieldSelector::parse("").unwrap().is_empty());
    // Cluster-scoped objects have an empty namespace.
    let f = FieldSelector::parse("metadata.namespace=").unwrap();
    assert!(f.matches("n1", ""));
    let f = FieldSelector::parse("metadata.name=a\\,b").unwrap();
    assert!(f.matches("a,b", ""));
}

#[test]
fn field_selector_errors_use_apiserver_wording() {
    let e = |s: &str| FieldSelector::parse(s).unwrap_err().0;
    assert_eq!(
        e("spec.nodeName=n1"),
        "\"spec.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    assert_eq!(
        e("metadata.name"),
        "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    );
    assert_eq!(
        e("metadata.name=a=b"),
        "invalid field selector: unescaped character in value: 61"
    );
    assert_eq!(
        e("metadata.name=a\\x"),
        "invalid field selector: invalid escape sequence: \\x"
    );
    assert_eq!(
        e("metadata.name=a\\"),
        "invalid field selector: invalid escape sequence: \\"
    );
}
