//! The emitter against go-yaml v2's own test cases and outputs of the real Go pipeline.

use serde_json::{Value, json};

use super::emit::{Scalar, format_float};
use super::*;

fn document(value: &Value) -> String {
    let mut out = Vec::new();
    write_document(&mut out, value);
    String::from_utf8(out).unwrap()
}

fn entry(key: &str, value: &Value) -> String {
    let mut out = Vec::new();
    write_entry(&mut out, key, value);
    String::from_utf8(out).unwrap()
}

/// The document of `{"v": value}` (go-yaml's tests mostly marshal a one-key map).
fn v(value: Value) -> String {
    document(&json!({ "v": value }))
}

/// go-yaml v2's `marshalTests` (encode_test.go) whose values JSON can hold.
#[test]
fn go_yaml_marshal_tests() {
    assert_eq!(document(&Value::Null), "null\n");
    assert_eq!(document(&json!({})), "{}\n");
    assert_eq!(document(&json!(123)), "123\n");
    assert_eq!(v(json!("hi")), "v: hi\n");
    assert_eq!(v(json!("true")), "v: \"true\"\n");
    assert_eq!(v(json!("false")), "v: \"false\"\n");
    assert_eq!(v(json!(true)), "v: true\n");
    assert_eq!(v(json!(false)), "v: false\n");
    assert_eq!(v(json!(10)), "v: 10\n");
    assert_eq!(v(json!(-10)), "v: -10\n");
    assert_eq!(v(json!(4_294_967_296_u64)), "v: 4294967296\n");
    assert_eq!(v(json!("10")), "v: \"10\"\n");
    assert_eq!(v(json!(0.1)), "v: 0.1\n");
    assert_eq!(v(json!(-0.1)), "v: -0.1\n");
    assert_eq!(v(Value::Null), "v: null\n");
    assert_eq!(v(json!("")), "v: \"\"\n");
    assert_eq!(v(json!(["A", "B"])), "v:\n- A\n- B\n");
    assert_eq!(v(json!(["A", "B\nC"])), "v:\n- A\n- |-\n  B\n  C\n");
    assert_eq!(
        v(json!(["A", 1, {"B": [2, 3]}])),
        "v:\n- A\n- 1\n- B:\n  - 2\n  - 3\n"
    );
    assert_eq!(document(&json!({"a": {"b": "c"}})), "a:\n  b: c\n");
    assert_eq!(document(&json!({"a": "-"})), "a: '-'\n");
    assert_eq!(
        document(&json!({"a": 1, "b": {"c": 2}})),
        "a: 1\nb:\n  c: 2\n"
    );
    assert_eq!(document(&json!({"a": "<foo>"})), "a: <foo>\n");
    assert_eq!(document(&json!({"a": "1:1"})), "a: \"1:1\"\n");
    assert_eq!(document(&json!({"a": "\u{0}"})), "a: \"\\0\"\n");
    assert_eq!(document(&json!({"a": "你好"})), "a: 你好\n");
    assert_eq!(
        document(&json!({"a": "2015-02-24T18:19:39Z"})),
        "a: \"2015-02-24T18:19:39Z\"\n"
    );
    assert_eq!(document(&json!({"a": "b: c"})), "a: 'b: c'\n");
    assert_eq!(
        document(&json!({"a": "Hello #comment"})),
        "a: 'Hello #comment'\n"
    );
    assert_eq!(
        document(&json!({"a": "你好 #comment"})),
        "a: '你好 #comment'\n"
    );
    assert_eq!(document(&json!({"a": 100.5})), "a: 100.5\n");
}

/// go-yaml v2's `TestLineWrapping`: a long string breaks at a space past column 80.
#[test]
fn long_strings_break_past_column_80() {
    assert_eq!(
        document(
            &json!({"a": "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 1234567890 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 1234567890 "})
        ),
        "a: 'abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 1234567890 abcdefghijklmnopqrstuvwxyz\n  ABCDEFGHIJKLMNOPQRSTUVWXYZ 1234567890 '\n"
    );
    // Without a space there is nowhere to break.
    let long = "x".repeat(200);
    assert_eq!(v(json!(long)), format!("v: {long}\n"));
}

/// go-yaml v2's `TestSortedOutput`, its string keys.
const SORTED_KEYS: [&str; 32] = [
    "", ".1", ".2", ".a", "1", "2", "a!10", "a/0001", "a/002", "a/3", "a/10", "a/11", "a/0012",
    "a/100", "a~10", "ab/1", "b/1", "b/01", "b/2", "b/02", "b/3", "b/03", "b1", "b01", "b3",
    "c2.10", "c10.2", "d1", "d7", "d7abc", "d12", "d12a",
];

#[test]
fn keys_in_go_yaml_order() {
    for (i, a) in SORTED_KEYS.iter().enumerate() {
        for (j, b) in SORTED_KEYS.iter().enumerate() {
            assert_eq!(key_order(a, b), i.cmp(&j), "{a:?} vs {b:?}");
        }
    }
    let map: Map<String, Value> = SORTED_KEYS
        .iter()
        .rev()
        .map(|k| (k.to_string(), json!(1)))
        .collect();
    let keys: Vec<&str> = sorted_entries(&map).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, SORTED_KEYS);
    let doc = document(&Value::Object(map));
    assert!(
        doc.starts_with("\"\": 1\n\".1\": 1\n\".2\": 1\n.a: 1\n\"1\": 1\n"),
        "{doc}"
    );
}

#[test]
fn key_order_edge_cases() {
    // Letters by rune, after everything else; digits of any script by value.
    assert_eq!(key_order("B", "a"), Ordering::Less);
    assert_eq!(key_order("a", "é"), Ordering::Less);
    assert_eq!(key_order("_", "B"), Ordering::Less);
    assert_eq!(key_order("a3", "a٣"), Ordering::Less);
    assert_eq!(key_order("a٣", "a10"), Ordering::Greater);
    assert_eq!(key_order("a9", "a10"), Ordering::Less);
    // Ⅻ (Nl) is neither a letter nor a digit to Go: it sorts before both.
    assert_eq!(key_order("Ⅻ", "a"), Ordering::Less);
    assert_eq!(key_order("Ⅻ", "0"), Ordering::Less);
    // Runs past int64 wrap as Go's do.
    assert_eq!(key_order("9223372036854775808", "1"), Ordering::Less);
    assert_eq!(key_order("a", "a"), Ordering::Equal);
    assert_eq!(key_order("a", "ab"), Ordering::Less);
    // Not transitive: 2 < 10 < 1a < 2. Sorting such keys must not panic.
    assert_eq!(key_order("2", "10"), Ordering::Less);
    assert_eq!(key_order("10", "1a"), Ordering::Less);
    assert_eq!(key_order("1a", "2"), Ordering::Less);
    let cycle = document(&json!({"2": 1, "10": 1, "1a": 1, "0a": 1, "08": 1}));
    assert_eq!(cycle.lines().count(), 5);
}

/// go-yaml v2's `TestQuotingMaintained` (sigs.k8s.io/yaml's fork reads integers past 64
/// bits as `*big.Int`, so those are quoted too).
#[test]
fn numbers_past_64_bits_stay_quoted() {
    assert_eq!(
        document(&json!({
            "A1": "0x0000000000000000000000010000000000000000",
            "A2": "0x000000000000000000000000FFFFFFFFFFFFFFFF",
            "A3": "1234",
        })),
        "A1: \"0x0000000000000000000000010000000000000000\"\nA2: \"0x000000000000000000000000FFFFFFFFFFFFFFFF\"\nA3: \"1234\"\n"
    );
}

#[test]
fn pod_metrics() {
    let pod = json!({"kind":"PodMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"p","namespace":"ns","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app":"web","pod-template-hash":"7d4b9c"}},"timestamp":"2024-05-01T09:59:51Z","window":"10.25s","containers":[{"name":"c","usage":{"cpu":"12345n","memory":"4096Ki"}}]});
    assert_eq!(
        document(&pod),
        "apiVersion: metrics.k8s.io/v1beta1
containers:
- name: c
  usage:
    cpu: 12345n
    memory: 4096Ki
kind: PodMetrics
metadata:
  creationTimestamp: \"2024-05-01T10:00:00Z\"
  labels:
    app: web
    pod-template-hash: 7d4b9c
  name: p
  namespace: ns
timestamp: \"2024-05-01T09:59:51Z\"
window: 10.25s
"
    );
}

#[test]
fn status() {
    let status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"podmetrics.metrics.k8s.io \"x\" not found","reason":"NotFound","details":{"name":"x","group":"metrics.k8s.io","kind":"pods"},"code":404});
    // `"` only matters at the start of a plain scalar.
    assert_eq!(
        document(&status),
        "apiVersion: v1
code: 404
details:
  group: metrics.k8s.io
  kind: pods
  name: x
kind: Status
message: podmetrics.metrics.k8s.io \"x\" not found
metadata: {}
reason: NotFound
status: Failure
"
    );
}

/// Documents checked byte for byte against Go: go-yaml v2.4.0 with the fork's
/// `resolve.go`, JSONToYAML of the JSON as Go's `encoding/json` writes it.
const CHECKED_AGAINST_GO: &[(&str, &str)] = &[
    (
        r#"[[1,[2]],[],{},[{}]]"#,
        "- - 1\n  - - 2\n- []\n- {}\n- - {}\n",
    ),
    (
        r#"{"plain":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua","double":"lorem ipsum dolor sit amet\tconsectetur adipiscing elit sed do eiusmod tempor  incididunt ut labore et dolore magna aliqua","nested":{"deeper":{"text":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt"}}}"#,
        "double: \"lorem ipsum dolor sit amet\\tconsectetur adipiscing elit sed do eiusmod tempor\n  \\ incididunt ut labore et dolore magna aliqua\"\nnested:\n  deeper:\n    text: lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor\n      incididunt\nplain: lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor\n  incididunt ut labore et dolore magna aliqua\n",
    ),
    (
        r#"{"a":"a\n","b":"a\n\n","c":"\n","d":" a\nb","e":"\na","f":"a\nb ","g":"a\n\tb","h":"a\r\nb","i":"a \nb","j":"a\n b"}"#,
        "a: |\n  a\nb: |+\n  a\n\nc: |2+\n\nd: |2-\n   a\n  b\ne: |2-\n\n  a\nf: \"a\\nb \"\ng: \"a\\n\\tb\"\nh: \"a\\r\\nb\"\ni: \"a \\nb\"\nj: |-\n  a\n   b\n",
    ),
    (
        r#"{"k":["x\ny",["p\nq"],{"m":"r\ns"}]}"#,
        "k:\n- |-\n  x\n  y\n- - |-\n    p\n    q\n- m: |-\n    r\n    s\n",
    ),
    (
        r#"{"a\nb":1,"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":2,"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb":{"x":[1]},"c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c":[1,2],"":{"":""}}"#,
        "\"\":\n  \"\": \"\"\n? |-\n  a\n  b\n: 1\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: 2\n? bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n: x:\n  - 1\n? c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c\n  c c c c c c c c c c c c c c c c c c c c c c c c c c c c\n: - 1\n  - 2\n",
    ),
    (
        r#"{"bom":"\ufeffab c","emoji":"a😀b","tab":"a\tb","nbsp":"a\u00a0b","ctl":"\u0001\u001b\b\f\u000b\u0007","nel":"a\u0085b","ls":"a\u2028b","ps":"\u2029","quote":"it's \"q\" \\","lead":" a","trail":"a ","dash":"- a","q":"? a","colon":": a","hash":"a #b","nohash":"a#b","flow":"[a],{b}","star":"*a","bang":"!a","pct":"%a","at":"@a","tick":"`a","pipe":"|","gt":">","amp":"&a","comma":",a","dashes":"--- a","dots":"...","yes":"yes","y":"y","on":"On","tilde":"~","empty":"","nul":"Null","inf":".Inf","nan":".nan","num":"0x1F","oct":"0o17","bin":"0b101","binplus":"0b+1","und":"1_000","flt":"1e3","b60":"1:20","b60f":"-1:20:30.5","ts":"2024-1-1","tsbad":"2024-02-30","tsz":"2024-01-01T10:00:00+24:00","tsnz":"2024-01-01T10:00:00","sp":"2024-01-01   1:2:3.5","big":"0x10000000000000000","neg":"-0x8000000000000001","dot":".5_0","dotbad":"._5","e400":"1e400","merge":"<<","eq":"="}"#,
        "amp: '&a'\nat: '@a'\nb60: \"1:20\"\nb60f: \"-1:20:30.5\"\nbang: '!a'\nbig: \"0x10000000000000000\"\nbin: \"0b101\"\nbinplus: \"0b+1\"\nbom: \"\\uFEFF\\x61\\x62\\x20\\x63\"\ncolon: ': a'\ncomma: ',a'\nctl: \"\\x01\\e\\b\\f\\v\\a\"\ndash: '- a'\ndashes: '--- a'\ndot: \".5_0\"\ndotbad: ._5\ndots: '...'\ne400: 1e400\nemoji: \"a\\U0001F600b\"\nempty: \"\"\neq: =\nflow: '[a],{b}'\nflt: \"1e3\"\ngt: '>'\nhash: 'a #b'\ninf: \".Inf\"\nlead: ' a'\nls: 'a\u{2028}  b'\nmerge: <<\nnan: \".nan\"\nnbsp: a\u{a0}b\nneg: -0x8000000000000001\nnel: a b\nnohash: a#b\nnul: \"Null\"\nnum: \"0x1F\"\noct: \"0o17\"\n\"on\": \"On\"\npct: '%a'\npipe: '|'\nps: '\u{2029}'\nq: '? a'\nquote: it's \"q\" \\\nsp: \"2024-01-01   1:2:3.5\"\nstar: '*a'\ntab: \"a\\tb\"\ntick: '`a'\ntilde: \"~\"\ntrail: 'a '\nts: \"2024-1-1\"\ntsbad: 2024-02-30\ntsnz: 2024-01-01T10:00:00\ntsz: \"2024-01-01T10:00:00+24:00\"\nund: \"1_000\"\n\"y\": \"y\"\n\"yes\": \"yes\"\n",
    ),
    (
        r#"{"i64min":-9223372036854775808,"u64max":18446744073709551615,"f":[0.0,-0.0,0.1,1.5,2.0,100.0,100000.0,1000000.0,123456789.0,1e+20,1e+21,0.0001,1e-05,1.5e-07,5e-324,1.7976931348623157e+308,705916134334287.2,0.3,-2.5]}"#,
        "f:\n- 0\n- -0\n- 0.1\n- 1.5\n- 2\n- 100\n- 100000\n- 1e+06\n- 1.23456789e+08\n- 1e+20\n- 1e+21\n- 0.0001\n- 1e-05\n- 1.5e-07\n- 5e-324\n- 1.7976931348623157e+308\n- 7.059161343342872e+14\n- 0.3\n- -2.5\ni64min: -9223372036854775808\nu64max: 18446744073709551615\n",
    ),
    (
        r#"{"2":1,"10":1,"a10":1,"a9":1,"a09":1,"a010":1,"b":1,"B":1,"_":1,"é":1,"٣":1,"a٣":1,"a3":1}"#,
        "_: 1\n\"2\": 1\n\"10\": 1\n٣: 1\nB: 1\na3: 1\na9: 1\na09: 1\na10: 1\na010: 1\na٣: 1\nb: 1\né: 1\n",
    ),
    (
        r#"{"items":[{"metadata":{"name":"a","labels":{}},"containers":[{"name":"c","usage":{"cpu":"0","memory":"0"}}]},{"metadata":{"name":"b"},"containers":[]}]}"#,
        "items:\n- containers:\n  - name: c\n    usage:\n      cpu: \"0\"\n      memory: \"0\"\n  metadata:\n    labels: {}\n    name: a\n- containers: []\n  metadata:\n    name: b\n",
    ),
];

#[test]
fn documents_checked_against_go() {
    for (json, yaml) in CHECKED_AGAINST_GO {
        let value: Value = serde_json::from_str(json).unwrap();
        assert_eq!(document(&value), *yaml, "{json}");
    }
}

/// What go-yaml writes for a string, by the style it needs.
#[test]
fn string_styles() {
    for (s, written) in [
        // Plain: nothing reads it back as another type.
        ("web", "web"),
        ("0b", "0b"),
        ("0x", "0x"),
        ("1e400", "1e400"),
        (".9_", ".9_"),
        ("-0x8000000000000001", "-0x8000000000000001"),
        ("2024-02-30", "2024-02-30"),
        ("2024-01-01T10:00:00", "2024-01-01T10:00:00"),
        ("2024-01-01T24:00:00Z", "2024-01-01T24:00:00Z"),
        ("2024-01-01T10:00:00+25:00", "2024-01-01T10:00:00+25:00"),
        ("1:60", "1:60"),
        ("<<", "<<"),
        ("a#b", "a#b"),
        ("a:b", "a:b"),
        ("-a", "-a"),
        ("it's", "it's"),
        // Double-quoted: plain, it would read back as null, bool, number or timestamp.
        ("", "\"\""),
        ("~", "\"~\""),
        ("Null", "\"Null\""),
        ("y", "\"y\""),
        ("off", "\"off\""),
        ("0", "\"0\""),
        ("-1", "\"-1\""),
        ("+0x10", "\"+0x10\""),
        ("0o17", "\"0o17\""),
        ("08", "\"08\""),
        ("1_000", "\"1_000\""),
        ("0b+1", "\"0b+1\""),
        ("-0b101", "\"-0b101\""),
        ("18446744073709551615", "\"18446744073709551615\""),
        ("0x10000000000000000", "\"0x10000000000000000\""),
        ("1.", "\"1.\""),
        (".5_0", "\".5_0\""),
        ("1e3", "\"1e3\""),
        ("-.INF", "\"-.INF\""),
        ("1:20", "\"1:20\""),
        ("-1:20:30.5", "\"-1:20:30.5\""),
        ("2024-1-1", "\"2024-1-1\""),
        ("2024-02-29", "\"2024-02-29\""),
        (
            "2024-01-01t10:00:00,5+05:30",
            "\"2024-01-01t10:00:00,5+05:30\"",
        ),
        ("2024-01-01   1:2:3.5", "\"2024-01-01   1:2:3.5\""),
        ("2024-01-01T10:00:00+24:00", "\"2024-01-01T10:00:00+24:00\""),
        // Single-quoted: plain is not allowed there.
        ("- a", "'- a'"),
        ("? a", "'? a'"),
        (": a", "': a'"),
        ("a: b", "'a: b'"),
        ("a #b", "'a #b'"),
        ("#a", "'#a'"),
        ("*a", "'*a'"),
        ("--- a", "'--- a'"),
        ("...", "'...'"),
        (" a", "' a'"),
        ("a ", "'a '"),
        ("'a'", "'''a'''"),
        ("a\u{2028}b", "'a\u{2028}  b'"),
        // Double-quoted with escapes: not printable, or a break a block cannot hold.
        ("a\tb", "\"a\\tb\""),
        ("a😀b", "\"a\\U0001F600b\""),
        ("\u{1}\u{1b}\u{7f}\u{9f}", "\"\\x01\\e\\x7F\\x9F\""),
        ("\u{fffe}", "\"\\uFFFE\""),
        ("\u{feff}a b", "\"\\uFEFF\\x61\\x20\\x62\""),
        ("a\r\nb", "\"a\\r\\nb\""),
        ("a\nb ", "\"a\\nb \""),
        ("a \nb", "\"a \\nb\""),
        // Literal.
        ("a\nb", "|-\n  a\n  b"),
        ("a\n", "|\n  a"),
        ("a\n\n", "|+\n  a\n"),
        ("\n", "|2+\n"),
        (" a\nb", "|2-\n   a\n  b"),
        ("a\n b", "|-\n  a\n   b"),
    ] {
        assert_eq!(entry("k", &json!(s)), format!("k: {written}\n"), "{s:?}");
    }
}

/// A raw NEL in a JSON string value is a line break to go-yaml's reader.
#[test]
fn nel_folds_as_go_yaml_reads_it() {
    assert_eq!(v(json!("a\u{85}b")), "v: a b\n");
    assert_eq!(v(json!("a \u{85} b")), "v: a b\n");
    assert_eq!(v(json!("a\u{85}\u{85}b")), "v: |-\n  a\n  b\n");
    assert_eq!(v(json!("\u{85}")), "v: ' '\n");
    assert_eq!(v(json!("a  b")), "v: a  b\n");
    // Keys are written as they are (Go cannot read such a key at all).
    assert_eq!(entry("a\u{85}b", &json!(1)), "? \"a\\Nb\"\n: 1\n");
}

#[test]
fn floats_as_go_formats_them() {
    for (f, text) in [
        (0.0, "0"),
        (-0.0, "-0"),
        (2.0, "2"),
        (100_000.0, "100000"),
        (1e6, "1e+06"),
        (123_456_789.0, "1.23456789e+08"),
        (1e21, "1e+21"),
        (1e-4, "0.0001"),
        (1.2e-4, "0.00012"),
        (1e-5, "1e-05"),
        (1.5e-7, "1.5e-07"),
        (5e-324, "5e-324"),
        (1.797_693_134_862_315_7e308, "1.7976931348623157e+308"),
        (-2.5, "-2.5"),
        // A tie between two shortest forms (…287.2 and …287.3 for …287.25) goes to the
        // even digit.
        (705_916_134_334_287.0 + 0.25, "7.059161343342872e+14"),
    ] {
        assert_eq!(format_float(f), text, "{f:e}");
    }
}

#[test]
fn keys_that_are_not_simple() {
    let long = "k".repeat(129);
    assert_eq!(entry(&long, &json!(1)), format!("? {long}\n: 1\n"));
    let longest = "k".repeat(128);
    assert_eq!(entry(&longest, &json!(1)), format!("{longest}: 1\n"));
    assert_eq!(
        entry(&long, &json!({"a": 1})),
        format!("? {long}\n: a: 1\n")
    );
    assert_eq!(
        entry(&long, &json!([1, 2])),
        format!("? {long}\n: - 1\n  - 2\n")
    );
    assert_eq!(entry("a\nb", &json!("c")), "? |-\n  a\n  b\n: c\n");
    assert_eq!(entry("", &json!({})), "\"\": {}\n");
}

/// Every top-level entry comes out as in the whole document; so do the document of the
/// JSON text and, streamed, each top-level list of a simple key, which the list streaming
/// relies on (checked where serde_json reads the JSON back as it was: without its
/// `float_roundtrip` feature it may read a float one ulp off).
fn assert_composes(value: &Value) {
    let doc = document(value);
    let Some(map) = value.as_object().filter(|map| !map.is_empty()) else {
        return;
    };
    let parts: String = sorted_entries(map)
        .into_iter()
        .map(|(k, v)| entry(k, v))
        .collect();
    assert_eq!(parts, doc, "{value}");
    let json = value.to_string();
    if serde_json::from_str::<Value>(&json).ok().as_ref() != Some(value) {
        return;
    }
    let from_json = document_from_json(json.as_bytes());
    assert_eq!(String::from_utf8(from_json).unwrap(), doc);
    for (key, items) in map {
        let Some(items) = items.as_array().filter(|items| !items.is_empty()) else {
            continue;
        };
        if !Scalar::string(key).fits_simple_key() {
            continue;
        }
        let (mut streamed, tail) = list_parts(json.as_bytes(), key);
        for item in items {
            entry_from_json(&mut streamed, item.to_string().as_bytes());
        }
        streamed.extend(tail);
        let streamed = String::from_utf8(streamed).unwrap();
        assert_eq!(streamed, doc, "{value} at {key}");
    }
}

#[test]
fn entries_compose_the_document() {
    for (json, _) in CHECKED_AGAINST_GO {
        assert_composes(&serde_json::from_str(json).unwrap());
    }
    assert!(document_from_json(b"{").is_empty());
    assert_eq!(list_parts(b"[]", "items"), (Vec::new(), Vec::new()));
}

/// Hostile values from a xorshift generator: nothing panics, every document ends with a
/// line break and its entries compose it.
#[test]
fn generated_values() {
    const PIECES: [&str; 24] = [
        "",
        " ",
        "a",
        "true",
        "0x1F",
        "1:20",
        "2024-01-01",
        "- ",
        ": ",
        " #",
        "'",
        "\"",
        "\\",
        "\n",
        "\r",
        "\t",
        "\u{0}",
        "\u{85}",
        "\u{2028}",
        "\u{feff}",
        "😀",
        "é",
        "٣",
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor",
    ];
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn text(&mut self) -> String {
            (0..self.below(5))
                .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
                .collect()
        }
        fn value(&mut self, depth: usize) -> Value {
            match self.below(if depth > 3 { 4 } else { 6 }) {
                0 => Value::String(self.text()),
                1 => json!(f64::from_bits(self.below(u64::MAX)).clamp(-1e300, 1e300)),
                2 => json!(self.below(u64::MAX) as i64),
                3 => [Value::Null, json!(true), json!(u64::MAX)][self.below(3) as usize].clone(),
                4 => Value::Array((0..self.below(4)).map(|_| self.value(depth + 1)).collect()),
                _ => Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.text(), self.value(depth + 1)))
                        .collect(),
                ),
            }
        }
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let value = rng.value(0);
        let doc = document(&value);
        // A kept final LS or PS ends the last line as go-yaml sees it.
        assert!(doc.ends_with(['\n', '\u{2028}', '\u{2029}']), "{doc:?}");
        assert_composes(&value);
    }
}
