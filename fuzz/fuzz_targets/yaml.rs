//! YAML answers (`apiserver::api::yaml`): any JSON document, the way the YAML serializer gets
//! it from a writer, turned into YAML as sigs.k8s.io/yaml's `JSONToYAML` does.
//!
//! The input is a JSON document (inputs that are not JSON are skipped: every writer's JSON
//! parses). Beyond "no panic": the output is UTF-8 and ends with a line break; a list streamed
//! item by item (`list_parts` around `entry_from_json` per item, as `ListBody::as_yaml`
//! writes it) is the document of the whole list, for the input's arrays under `items`
//! (and, wrapped, for the input itself as one item); `write_entry` of each key of an object
//! is its document's text for that key.

#![no_main]

use apiserver::api::yaml::{
    document_from_json, entry_from_json, key_order, list_parts, write_document, write_entry,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// The list `{"kind":…, "items":[…], …}` written as the server streams it.
fn streamed(list: &Map<String, Value>) -> Vec<u8> {
    let mut envelope = list.clone();
    let items = match envelope.insert("items".to_owned(), json!([])) {
        Some(Value::Array(items)) => items,
        _ => return Vec::new(),
    };
    let envelope = serde_json::to_vec(&envelope).unwrap_or_default();
    if items.is_empty() {
        return document_from_json(&envelope);
    }
    let (mut out, tail) = list_parts(&envelope, "items");
    for item in &items {
        entry_from_json(&mut out, &serde_json::to_vec(item).unwrap_or_default());
    }
    out.extend_from_slice(&tail);
    out
}

/// The document of `value` written as JSON text and read back, as the streamed list's items
/// are (serde_json without `float_roundtrip` may read a float one ulp off the one it wrote,
/// the same way whether the float stands alone or in a whole list).
fn reparsed(value: &Value) -> Vec<u8> {
    document_from_json(&serde_json::to_vec(value).unwrap_or_default())
}

fn document(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_document(&mut out, value);
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let whole = document_from_json(data);
    assert_eq!(whole, document(&value));
    // UTF-8, ending with a line break: `\n`, or the break a literal block's text ends with
    // (CR, NEL, LS, PS), which go-yaml writes as it is.
    let text = std::str::from_utf8(&whole).expect("UTF-8");
    assert!(
        matches!(
            text.chars().last(),
            Some('\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
        ),
        "{text:?}"
    );

    if let Value::Object(map) = &value {
        // Each entry as the document writes it, in go-yaml's key order (a total order for
        // keys without digits; with them it is not, and Go's own order varies).
        let mut keys: Vec<&String> = map.keys().collect();
        if keys.iter().any(|k| k.chars().any(|c| c.is_numeric())) {
            keys.clear();
        }
        keys.sort_by(|a, b| key_order(a, b));
        let mut entries = Vec::new();
        for key in &keys {
            write_entry(&mut entries, key, &map[key.as_str()]);
        }
        if !keys.is_empty() {
            assert_eq!(entries, whole, "entries");
        }
        if matches!(map.get("items"), Some(Value::Array(_))) {
            assert_eq!(streamed(map), reparsed(&value), "streamed");
        }
    }
    let mut wrapped = Map::new();
    wrapped.insert("kind".to_owned(), json!("List"));
    wrapped.insert("items".to_owned(), json!([value.clone()]));
    assert_eq!(
        streamed(&wrapped),
        reparsed(&Value::Object(wrapped.clone())),
        "one item"
    );
});
