//! Kubernetes label selectors (full syntax) and the `metadata.name` / `metadata.namespace`
//! field selectors.
//!
//! The label selector grammar, its validation and its error texts follow apimachinery's
//! `labels.Parse` (`pkg/labels/selector.go`, `pkg/util/validation/validation.go`); the field
//! selector follows `fields.ParseSelector` (`pkg/fields/selector.go`) plus the apiserver's
//! default field label conversion (`runtime.DefaultMetaV1FieldSelectorConversion`).

use std::fmt::Write as _;

use crate::go::quote;
use crate::inventory::Labels;

/// A parsed label selector: every requirement must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One `key op values` term.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    /// Sorted and deduplicated, as Go's `sets.String.List()`.
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One selector requirement as authorization sees it (`authorizer.Attributes`
/// `GetLabelSelector`/`GetFieldSelector`) and a SubjectAccessReview carries it (KEP-4601):
/// `operator` in `metav1.LabelSelectorOperator` / `FieldSelectorOperator` terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorRequirement {
    /// Label key or field path.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: &'static str,
    /// Values, sorted and unique for labels.
    pub values: Vec<String>,
}

/// A selector that did not parse; the message is shown to the user in a 400 Status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// apimachinery's `Lexer`: a NUL byte ends the input as the end of the string does.
fn lex(input: &str) -> Vec<(Token, &str)> {
    let bytes = input.as_bytes();
    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < len && is_whitespace(bytes[pos]) {
            pos += 1;
        }
        if pos >= len {
            out.push((Token::EndOfString, ""));
            return out;
        }
        let start = pos;
        if is_special(bytes[pos]) {
            // Longest run of special bytes that is still a token.
            let mut best = None;
            while pos < len && is_special(bytes[pos]) {
                let candidate = &input[start..=pos];
                if let Some(tok) = keyword(candidate) {
                    best = Some((tok, candidate));
                    pos += 1;
                } else if best.is_some() {
                    break;
                } else {
                    pos += 1;
                }
            }
            // Every single special byte is a token, so `best` is always set.
            out.push(best.unwrap_or((Token::Identifier, &input[start..pos])));
        } else {
            while pos < len && !is_special(bytes[pos]) && !is_whitespace(bytes[pos]) {
                pos += 1;
            }
            let word = &input[start..pos];
            out.push((keyword(word).unwrap_or(Token::Identifier), word));
        }
    }
}

struct Parser<'a> {
    items: Vec<(Token, &'a str)>,
    position: usize,
}

impl<'a> Parser<'a> {
    /// In the `Values` context `in` and `notin` are identifiers (apimachinery `lookahead`).
    fn lookahead(&self) -> (Token, &'a str) {
        let i = self.position.min(self.items.len() - 1);
        let (tok, lit) = self.items[i];
        (values_context(tok), lit)
    }

    fn consume(&mut self, values: bool) -> (Token, &'a str) {
        let i = self.position.min(self.items.len() - 1);
        self.position += 1;
        let (tok, lit) = self.items[i];
        (if values { values_context(tok) } else { tok }, lit)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead();
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| {
                        SelectorError(format!("unable to parse requirement: {}", e.0))
                    })?;
                    requirements.push(r);
                    let (t, l) = self.consume(true);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead();
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(err(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Op::Exists | Op::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(&'a str, Option<Op>), SelectorError> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(true);
        if tok == Token::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (tok, lit) = self.consume(true);
        }
        if tok != Token::Identifier {
            return Err(err(format!("found '{lit}', expected: identifier")));
        }
        if let Some(e) = validate_label_key(lit, "<nil>") {
            return Err(err(e));
        }
        let (t, _) = self.lookahead();
        if (t == Token::EndOfString || t == Token::Comma) && op.is_none() {
            op = Some(Op::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Op, SelectorError> {
        let (tok, lit) = self.consume(false);
        Ok(match tok {
            Token::In => Op::In,
            Token::Equals => Op::Equals,
            Token::DoubleEquals => Op::DoubleEquals,
            Token::GreaterThan => Op::GreaterThan,
            Token::LessThan => Op::LessThan,
            Token::NotIn => Op::NotIn,
            Token::NotEquals => Op::NotEquals,
            _ => {
                return Err(err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, lit) = self.consume(true);
        if tok != Token::OpenPar {
            return Err(err(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead();
        match tok {
            Token::Identifier | Token::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(true);
                if t != Token::ClosedPar {
                    return Err(err(format!("found '{lit}', expected: ')'")));
                }
                Ok(s)
            }
            Token::ClosedPar => {
                self.consume(true);
                Ok(vec![String::new()])
            }
            _ => Err(err(format!(
                "found '{lit}', expected: ',', ')' or identifier"
            ))),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, SelectorError> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(true);
            match tok {
                Token::Identifier => {
                    s.push(lit.to_owned());
                    let (t2, l2) = self.lookahead();
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(s),
                        _ => return Err(err(format!("found '{l2}', expected: ',' or ')'"))),
                    }
                }
                Token::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    let (t2, _) = self.lookahead();
                    if t2 == Token::ClosedPar {
                        s.push(String::new());
                        return Ok(s);
                    }
                    if t2 == Token::Comma {
                        self.consume(true);
                        s.push(String::new());
                    }
                }
                _ => return Err(err(format!("found '{lit}', expected: ',', or identifier"))),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, _) = self.lookahead();
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(true);
        if tok == Token::Identifier {
            return Ok(vec![lit.to_owned()]);
        }
        Err(err(format!("found '{lit}', expected: identifier")))
    }
}

fn values_context(tok: Token) -> Token {
    match tok {
        Token::In | Token::NotIn => Token::Identifier,
        t => t,
    }
}

fn err(message: String) -> SelectorError {
    SelectorError(message)
}

/// apimachinery `NewRequirement`: the checks and the aggregated error text.
fn new_requirement(
    key: &str,
    op: Op,
    mut values: Vec<String>,
) -> Result<Requirement, SelectorError> {
    values.sort();
    values.dedup();
    let mut errors: Vec<String> = Vec::new();
    if let Some(e) = validate_label_key(key, "key") {
        errors.push(e);
    }
    match op {
        Op::In | Op::NotIn if values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
            go_string_slice(&values)
        )),
        Op::Equals | Op::DoubleEquals | Op::NotEquals if values.len() != 1 => errors.push(format!(
            "values: Invalid value: {}: exact-match compatibility requires one single value",
            go_string_slice(&values)
        )),
        Op::Exists | Op::DoesNotExist if !values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: values set must be empty for exists and does not exist",
            go_string_slice(&values)
        )),
        Op::GreaterThan | Op::LessThan => {
            if values.len() != 1 {
                errors.push(format!(
                    "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                    go_string_slice(&values)
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if parse_go_int(v).is_none() {
                    errors.push(format!(
                        "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                        quote(v)
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, v) in values.iter().enumerate() {
        let msgs = label_value_errors(v);
        if !msgs.is_empty() {
            errors.push(format!(
                "values[{i}][{key}]: Invalid value: {}: {}",
                quote(v),
                msgs.join("; ")
            ));
        }
    }
    if !errors.is_empty() {
        return Err(SelectorError(aggregate(errors)));
    }
    Ok(Requirement {
        key: key.to_owned(),
        op,
        values,
    })
}

/// `utilerrors.NewAggregate(...).Error()`: one message as is, several deduplicated in brackets.
fn aggregate(errors: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.pop().unwrap_or_default()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// `field.Invalid(path, key, ...)` for a label key, or `None` when the key is valid.
fn validate_label_key(key: &str, path: &str) -> Option<String> {
    let msgs = qualified_name_errors(key);
    if msgs.is_empty() {
        None
    } else {
        Some(format!(
            "{path}: Invalid value: {}: {}",
            quote(key),
            msgs.join("; ")
        ))
    }
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery `validation.RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    out.push_str(" (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{e}', ");
    }
    let _ = write!(out, "regex used for validation is '{fmt}')");
    out
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// The characters of an RFC 1123 subdomain (lower-case alphanumeric labels, `-` inside,
/// joined by `.`), without its length limit.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(f), Some(l)) => {
                    (f.is_ascii_lowercase() || f.is_ascii_digit())
                        && (l.is_ascii_lowercase() || l.is_ascii_digit())
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                }
                _ => false,
            }
        })
}

/// apimachinery `validation.IsQualifiedName`.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 characters".to_owned());
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_ERR,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery `validation.IsValidLabelValue`.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Go's `strconv.ParseInt(s, 10, 64)`.
fn parse_go_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

/// Go's `%#v` of a `[]string`.
fn go_string_slice(values: &[String]) -> String {
    let inner: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

/// A selector less one of its requirements ([`LabelSelector::besides`]).
#[derive(Clone, Copy, Debug)]
pub struct Besides<'a> {
    selector: &'a LabelSelector,
    /// The requirement not checked.
    skip: Option<usize>,
}

impl Besides<'_> {
    /// Whether `labels` meet every requirement but the skipped one.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.selector
            .requirements
            .iter()
            .enumerate()
            .all(|(i, r)| Some(i) == self.skip || r.matches(labels))
    }

    /// Whether nothing is left to check: every set of labels matches.
    pub fn is_everything(&self) -> bool {
        let skipped = usize::from(self.skip.is_some());
        self.selector.requirements.len() == skipped
    }
}

impl LabelSelector {
    /// Parses `labelSelector` syntax (`a=b,c!=d,e in (f,g),!h,i,j>3`). Empty selects
    /// everything. Errors carry apimachinery's `labels.Parse` wording.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            items: lex(s),
            position: 0,
        };
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether the labels match every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// This selector for labels already known to meet the requirement `key` with one of
    /// `values` (one that [`LabelSelector::required_values`] gave, whose pods a label index
    /// handed over): [`Besides::matches`] checks the other requirements, not that one again;
    /// a selector of that one requirement matches without reading the labels. The requirement
    /// to skip is found once, for the many pods one index lookup hands over.
    pub fn besides(&self, key: &str, values: &[String]) -> Besides<'_> {
        let skip = self.requirements.iter().position(|r| {
            matches!(r.op, Op::In | Op::Equals | Op::DoubleEquals)
                && r.key == key
                && r.values == values
        });
        Besides {
            selector: self,
            skip,
        }
    }

    /// Selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements a match must meet with one of a few values (`k=v`, `k==v`,
    /// `k in (v,w)`): a label index narrows a list to the pods carrying one of them.
    pub fn required_values(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.requirements
            .iter()
            .filter(|r| matches!(r.op, Op::In | Op::Equals | Op::DoubleEquals))
            .map(|r| (r.key.as_str(), r.values.as_slice()))
    }

    /// The requirements authorization sees (the webhook authorizer's
    /// `labelSelectorToAuthorizationAPI`): `=`, `==` and `in` become `In`, `!=` and `notin`
    /// `NotIn`; `>` and `<` are left out, which only broadens the check. Sorted by key.
    pub fn authorization_requirements(&self) -> Vec<SelectorRequirement> {
        self.requirements
            .iter()
            .filter_map(|r| {
                let operator = match r.op {
                    Op::In | Op::Equals | Op::DoubleEquals => "In",
                    Op::NotIn | Op::NotEquals => "NotIn",
                    Op::Exists => "Exists",
                    Op::DoesNotExist => "DoesNotExist",
                    Op::GreaterThan | Op::LessThan => return None,
                };
                Some(SelectorRequirement {
                    key: r.key.clone(),
                    operator,
                    values: r.values.clone(),
                })
            })
            .collect()
    }
}

impl Requirement {
    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// apimachinery `Requirement.Matches`.
    fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            Op::In | Op::Equals | Op::DoubleEquals => value.is_some_and(|v| self.has_value(v)),
            Op::NotIn | Op::NotEquals => value.is_none_or(|v| !self.has_value(v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let Some(have) = value.and_then(parse_go_int) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Some(want) = parse_go_int(want) else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

mod field;
pub use field::{Field, FieldSelector, ParsedFields, field_requirements};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
