//! Field selectors: `metadata.name` and `metadata.namespace` only, as the metrics API's
//! object meta field set allows.

use super::{SelectorError, SelectorRequirement};
use crate::go::quote;

/// A field the metrics API can select on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `metadata.name`
    Name,
    /// `metadata.namespace` (empty for cluster-scoped objects).
    Namespace,
}

/// One `field=value` / `field!=value` term.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    field: Field,
    value: String,
    equal: bool,
}

/// A parsed field selector on `metadata.name` and `metadata.namespace`; every term must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses `fieldSelector` syntax (`a=b`, `a==b`, `a!=b`, comma-separated, `\` escapes)
    /// and rejects fields other than `metadata.name` and `metadata.namespace` with the
    /// apiserver's field label conversion message: [`FieldSelector::parse_syntax`], then
    /// [`ParsedFields::convert`].
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        Self::parse_syntax(selector)?.convert()
    }

    /// `fields.ParseSelector` alone: the syntax, on any field. The apiserver checks it while
    /// it decodes a list's query, and converts the field labels only after it validated the
    /// other options.
    pub fn parse_syntax(selector: &str) -> Result<ParsedFields<'_>, SelectorError> {
        parse_terms(selector).map(ParsedFields)
    }

    /// Whether an object with this name and namespace (`""` when cluster-scoped) matches.
    pub fn matches(&self, name: &str, namespace: &str) -> bool {
        self.terms.iter().all(|t| {
            let have = match t.field {
                Field::Name => name,
                Field::Namespace => namespace,
            };
            (have == t.value) == t.equal
        })
    }

    /// Selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value a `metadata.namespace=` / `==` term requires, if any (lets a pod list skip
    /// other namespaces early).
    pub fn required(&self, field: Field) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.equal)
            .map(|t| t.value.as_str())
    }
}

/// A field selector whose syntax parsed, before its field labels are converted.
#[derive(Debug)]
pub struct ParsedFields<'a>(Vec<(&'a str, bool, String)>);

impl ParsedFields<'_> {
    /// The apiserver's `Transform(ConvertFieldLabel)`: only `metadata.name` and
    /// `metadata.namespace` are known.
    pub fn convert(self) -> Result<FieldSelector, SelectorError> {
        let mut terms = Vec::with_capacity(self.0.len());
        for (lhs, equal, value) in self.0 {
            let field = match lhs {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(SelectorError(format!(
                        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        quote(other)
                    )));
                }
            };
            terms.push(FieldTerm {
                field,
                value,
                equal,
            });
        }
        Ok(FieldSelector { terms })
    }
}

/// apimachinery `fields.ParseSelector`: terms sorted, each `key`, whether it is an equality,
/// and its unescaped value; before any field label conversion.
fn parse_terms(selector: &str) -> Result<Vec<(&str, bool, String)>, SelectorError> {
    let mut parts = split_terms(selector);
    parts.sort_unstable();
    let mut raw = Vec::new();
    for part in parts {
        if part.is_empty() {
            continue;
        }
        let Some((lhs, op, rhs)) = split_term(part) else {
            return Err(SelectorError(format!(
                "invalid selector: '{selector}'; can't understand '{part}'"
            )));
        };
        let value = unescape_value(rhs)?;
        raw.push((lhs, op != "!=", value));
    }
    Ok(raw)
}

/// The requirements authorization sees of a `fieldSelector` (`authorizer.Attributes`
/// `GetFieldSelector`, as a SubjectAccessReview carries them): the same grammar as
/// [`FieldSelector::parse`], on any field (a field the API rejects is still authorized on,
/// as kube-apiserver does before its storage refuses it).
pub fn field_requirements(selector: &str) -> Result<Vec<SelectorRequirement>, SelectorError> {
    Ok(parse_terms(selector)?
        .into_iter()
        .map(|(key, equal, value)| SelectorRequirement {
            key: key.to_owned(),
            operator: if equal { "In" } else { "NotIn" },
            values: vec![value],
        })
        .collect())
}

/// apimachinery `fields.splitTerms`: commas not preceded by a backslash split terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// apimachinery `fields.splitTerm`: the first `!=`, `==` or `=` splits.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

/// apimachinery `fields.UnescapeValue`.
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                return Err(SelectorError(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError(
            "invalid field selector: invalid escape sequence: \\".to_owned(),
        ));
    }
    Ok(out)
}
