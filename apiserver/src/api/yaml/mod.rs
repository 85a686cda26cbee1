//! YAML output as k8s.io/apimachinery's YAML serializer writes it: the object's JSON turned
//! into YAML by sigs.k8s.io/yaml's `JSONToYAML` (go-yaml v2).
//!
//! `JSONToYAML` reads the JSON with go-yaml v2's `yaml.Unmarshal` into `interface{}` and
//! writes that with go-yaml v2's `yaml.Marshal`. This is a port of the parts of go-yaml v2
//! (sigs.k8s.io/yaml's fork, `goyaml.v2/`) such a value goes through:
//! - reading: a JSON string value comes back as go-yaml's scanner reads a double-quoted scalar
//!   (`emit::scanned`); a JSON number as `int`, `uint64` or `float64`, which serde_json's
//!   `i64`/`u64`/`f64` match.
//! - `encode.go`: the scalar style each value asks for (`emit::string_style`,
//!   `emit::number_text`); map keys in `keyList` order (`sorter.go`, [`key_order`], in
//!   `order`); `resolve.go`'s implicit typing, which makes a string quoted when, plain, it
//!   would read back as something else (`resolve`).
//! - `emitterc.go`: the emitter's states for block collections (`emit::Emitter`), its scalar
//!   analysis and style choice and its scalar writers, with go-yaml's defaults: indent 2,
//!   width 80, unicode output, `\n` breaks.
//!
//! `yaml.Marshal` asks for block collections only; the emitter writes an empty one as flow
//! `{}` / `[]`, which holds nothing, so the flow-context rules are left out.

mod emit;
mod order;
mod resolve;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::cmp::Ordering;

use serde_json::{Map, Value};

use self::emit::Emitter;
use self::order::{key_less, sorted_entries};

/// `emitter.best_indent`, go-yaml's default (`yaml_emitter_emit_stream_start`).
const BEST_INDENT: u8 = 2;
/// `emitter.best_width`: the column past which the scalar writers break a line at a space.
const BEST_WIDTH: usize = 80;
/// The longest scalar, in bytes, that `yaml_emitter_check_simple_key` writes as `key:`.
const MAX_SIMPLE_KEY_LEN: usize = 128;

/// Writes `value` as a YAML document (no `---`, ending in a newline), as JSONToYAML does.
pub fn write_document(out: &mut Vec<u8>, value: &Value) {
    // `yaml_emitter_emit_stream_start` leaves the indent at -1 for the root node.
    let mut emitter = Emitter::new(out, -1);
    emitter.node(value, false);
    // `yaml_emitter_emit_document_end` (implicit: no `...`).
    emitter.write_indent();
}

/// Writes one `key: value` entry of a top-level (column 0) block mapping, exactly as it would
/// appear inside write_document's output of a map holding that key (value nested with
/// go-yaml's indentation; an empty map/sequence as `{}`/`[]`).
pub fn write_entry(out: &mut Vec<u8>, key: &str, value: &Value) {
    let mut emitter = Emitter::new(out, 0);
    emitter.block_mapping_key(key, value);
    // What the next key's (or the document end's) `yaml_emitter_write_indent` writes.
    emitter.write_indent();
}

/// Writes `value` as one entry of a block sequence that is the value of a top-level key, in
/// go-yaml's compact style (`- ` at column 0, a mapping's first key on the same line, its
/// other keys at column 2), exactly as each element of `items:` appears in write_document's
/// output of `{"items":[...]}`.
pub fn write_sequence_entry(out: &mut Vec<u8>, value: &Value) {
    // The sequence of a top-level key is indentless: its indent is the mapping's, 0.
    let mut emitter = Emitter::new(out, 0);
    emitter.block_sequence_item(value);
    emitter.write_indent();
}

/// go-yaml v2's order of map keys (its `keyList.Less` in sorter.go, for string keys).
///
/// A natural order: at the first rune that differs, two letters compare as runes, a letter
/// sorts after a non-letter, and otherwise the runs of digits starting there compare as
/// numbers. It is not transitive for some mixes of digits and letters (`"2" < "10" < "1a" <
/// "2"`), where Go's own order follows its random map order; `slice::sort_by` may panic on
/// such an order, a merge sort does not.
pub fn key_order(a: &str, b: &str) -> Ordering {
    if key_less(a, b) {
        Ordering::Less
    } else if key_less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// JSONToYAML of a JSON document this server wrote. Every writer's JSON parses (the tests
/// check it); JSON that did not would be logged and give an empty document.
pub fn document_from_json(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + json.len() / 2);
    if let Some(value) = parse::<Value>(json) {
        write_document(&mut out, &value);
    }
    out
}

/// [`write_sequence_entry`] of a JSON value this server wrote (see [`document_from_json`]).
pub fn entry_from_json(out: &mut Vec<u8>, json: &[u8]) {
    if let Some(value) = parse::<Value>(json) {
        write_sequence_entry(out, &value);
    }
}

fn parse<T: serde::de::DeserializeOwned>(json: &[u8]) -> Option<T> {
    match serde_json::from_slice(json) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::error!(%error, "JSON written for a YAML answer did not parse");
            None
        }
    }
}

/// The YAML of a JSON object around the block sequence that is the value of `key`: the
/// entries that sort before `key` and `key:` on its own line, then the entries after it. The
/// sequence's entries, each written by [`write_sequence_entry`], go between the two. `key`
/// is a simple key such as `items`; JSON that is not an object gives two empty parts.
pub fn list_parts(json: &[u8], key: &str) -> (Vec<u8>, Vec<u8>) {
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let Some(map) = parse::<Map<String, Value>>(json) else {
        return (head, tail);
    };
    let mut before = true;
    for (k, value) in sorted_entries(&map) {
        if k == key {
            let mut emitter = Emitter::new(&mut head, 0);
            emitter.block_mapping_key_only(key);
            emitter.write_indent();
            before = false;
        } else {
            write_entry(if before { &mut head } else { &mut tail }, k, value);
        }
    }
    (head, tail)
}
