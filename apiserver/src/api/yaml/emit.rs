//! go-yaml v2's emitter (`emitterc.go`) for the values `JSONToYAML` writes: block
//! collections, the scalar analysis and style choice, the scalar writers; and how go-yaml's
//! scanner reads a JSON string back (`scannerc.go`).

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

use super::order::sorted_entries;
use super::resolve::{is_base60_float, resolves_to_other_tag};
use super::{BEST_INDENT, BEST_WIDTH, MAX_SIMPLE_KEY_LEN};

/// `yaml_emitter_t`'s output state, driven by the tree instead of an event queue: the
/// `indents` stack is the call stack, and a lookahead such as `check_empty_mapping` is a look
/// at the value.
pub(super) struct Emitter<'a> {
    out: &'a mut Vec<u8>,
    /// `emitter.indent`: the current block's indentation, -1 before the root node.
    indent: isize,
    /// `emitter.column`: characters (not bytes) written on the current line.
    column: usize,
    /// `emitter.whitespace`: the last thing written was whitespace.
    whitespace: bool,
    /// `emitter.indention`: only indentation was written on the current line so far.
    indention: bool,
}

impl<'a> Emitter<'a> {
    /// The state `yaml_emitter_emit_stream_start` sets, at indent `indent`.
    pub(super) fn new(out: &'a mut Vec<u8>, indent: isize) -> Self {
        Emitter {
            out,
            indent,
            column: 0,
            whitespace: true,
            indention: true,
        }
    }

    /// `yaml_emitter_emit_node` for `value` as go-yaml's encoder marshals it (`marshal`),
    /// `mapping_context` when it is the value of a mapping entry.
    pub(super) fn node(&mut self, value: &Value, mapping_context: bool) {
        match value {
            Value::Null => self.scalar(&Scalar::new("null", Style::Plain), false),
            Value::Bool(b) => {
                let text = if *b { "true" } else { "false" };
                self.scalar(&Scalar::new(text, Style::Plain), false);
            }
            Value::Number(n) => self.scalar(&Scalar::new(&number_text(n), Style::Plain), false),
            Value::String(s) => self.scalar(&Scalar::string(&scanned(s)), false),
            Value::Array(items) if items.is_empty() => self.empty_flow(b"[", b"]"),
            Value::Array(items) => self.block_sequence(items, mapping_context),
            Value::Object(map) if map.is_empty() => self.empty_flow(b"{", b"}"),
            Value::Object(map) => self.block_mapping(map),
        }
    }

    /// An empty collection, which `yaml_emitter_emit_sequence_start` /
    /// `yaml_emitter_emit_mapping_start` send to flow style: its first and last
    /// `yaml_emitter_emit_flow_sequence_item` (or `_mapping_key`) write the brackets.
    fn empty_flow(&mut self, open: &[u8], close: &[u8]) {
        self.write_indicator(open, true, true, false);
        self.write_indicator(close, false, false, false);
    }

    /// `yaml_emitter_emit_block_sequence_item` for every item of a non-empty sequence; inside
    /// a mapping whose key line holds more than indentation it is indentless (`key:\n- a`).
    fn block_sequence(&mut self, items: &[Value], mapping_context: bool) {
        let indentless = mapping_context && !self.indention;
        let saved = self.increase_indent(false, indentless);
        for item in items {
            self.block_sequence_item(item);
        }
        self.indent = saved;
    }

    /// `yaml_emitter_emit_block_sequence_item`: `- ` and the item.
    pub(super) fn block_sequence_item(&mut self, item: &Value) {
        self.write_indent();
        self.write_indicator(b"-", true, false, true);
        self.node(item, false);
    }

    /// `mapv` (keys in `keyList` order) through `yaml_emitter_emit_block_mapping_key` for a
    /// non-empty mapping.
    fn block_mapping(&mut self, map: &Map<String, Value>) {
        let saved = self.increase_indent(false, false);
        for (key, value) in sorted_entries(map) {
            self.block_mapping_key(key, value);
        }
        self.indent = saved;
    }

    /// `yaml_emitter_emit_block_mapping_key` and `_value`: `key: value`, or `? key` and
    /// `: value` on the next line for a key that `yaml_emitter_check_simple_key` rejects.
    pub(super) fn block_mapping_key(&mut self, key: &str, value: &Value) {
        self.block_mapping_key_only(key);
        self.node(value, true);
    }

    /// The part of [`Self::block_mapping_key`] up to the value.
    pub(super) fn block_mapping_key_only(&mut self, key: &str) {
        self.write_indent();
        let key = Scalar::string(key);
        if key.fits_simple_key() {
            self.scalar(&key, true);
            self.write_indicator(b":", false, false, false);
        } else {
            self.write_indicator(b"?", true, false, true);
            self.scalar(&key, false);
            self.write_indent();
            self.write_indicator(b":", true, false, true);
        }
    }

    /// `yaml_emitter_emit_scalar`: the style `yaml_emitter_select_scalar_style` settles on,
    /// written one indentation step in (`yaml_emitter_process_scalar`).
    fn scalar(&mut self, scalar: &Scalar<'_>, simple_key: bool) {
        let style = select_style(scalar, simple_key);
        let saved = self.increase_indent(true, false);
        let text = scalar.text;
        match style {
            Style::Plain => self.write_plain(text, !simple_key),
            Style::SingleQuoted => self.write_single_quoted(text, !simple_key),
            Style::DoubleQuoted => self.write_double_quoted(text, !simple_key),
            Style::Literal => self.write_literal(text),
        }
        self.indent = saved;
    }

    /// `yaml_emitter_increase_indent`; returns the indent to restore (the `indents` stack).
    fn increase_indent(&mut self, flow: bool, indentless: bool) -> isize {
        let saved = self.indent;
        if self.indent < 0 {
            self.indent = if flow { isize::from(BEST_INDENT) } else { 0 };
        } else if !indentless {
            self.indent += isize::from(BEST_INDENT);
        }
        saved
    }

    /// `put`: one ASCII byte.
    fn put(&mut self, byte: u8) {
        self.out.push(byte);
        self.column += 1;
    }

    /// `put_break`: a `\n` (`yaml_LN_BREAK`).
    fn put_break(&mut self) {
        self.out.push(b'\n');
        self.column = 0;
    }

    /// `write`: one character of a scalar.
    fn write_char(&mut self, c: char) {
        let mut buf = [0; 4];
        self.out
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        self.column += 1;
    }

    /// `write_break`: a line break of a scalar, `\n` as the emitter's break, any other as it
    /// is (it still ends the line for the column count).
    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.write_char(c);
            self.column = 0;
        }
    }

    /// `yaml_emitter_write_indent`: a line break unless only indentation is on the line
    /// (and not past the indent), then spaces up to the indent.
    pub(super) fn write_indent(&mut self) {
        let indent = usize::try_from(self.indent).unwrap_or(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(b' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    /// `yaml_emitter_write_indicator`: an ASCII indicator, after a space if it needs one.
    fn write_indicator(
        &mut self,
        indicator: &[u8],
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(b' ');
        }
        self.out.extend_from_slice(indicator);
        self.column += indicator.len();
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    /// `yaml_emitter_write_plain_scalar`, breaking the line at a single space past the width
    /// when `allow_breaks`. A plain scalar holds no line break (the analysis forbids it).
    fn write_plain(&mut self, text: &str, allow_breaks: bool) {
        if !self.whitespace {
            self.put(b' ');
        }
        let mut spaces = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ' ' {
                if allow_breaks && !spaces && self.column > BEST_WIDTH && chars.peek() != Some(&' ')
                {
                    self.write_indent();
                } else {
                    self.write_char(c);
                }
                spaces = true;
            } else {
                self.write_char(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    /// `yaml_emitter_write_single_quoted_scalar`: `'` doubled, line breaks (LS, PS: the
    /// printable ones) kept, a single inner space past the width broken.
    fn write_single_quoted(&mut self, text: &str, allow_breaks: bool) {
        self.write_indicator(b"'", true, false, false);
        let mut spaces = false;
        let mut breaks = false;
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == ' ' {
                let inner = i > 0 && i + 1 < text.len();
                let next_is_space = chars.peek().is_some_and(|&(_, n)| n == ' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && inner && !next_is_space {
                    self.write_indent();
                } else {
                    self.write_char(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.put(b'\'');
                }
                self.write_char(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.write_indicator(b"'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    /// `yaml_emitter_write_double_quoted_scalar`: escapes for what is not printable, line
    /// breaks, `"` and `\` (for every character once the text starts with a BOM: go-yaml's
    /// `is_bom` looks at the start of the text), and an inner space past the width broken
    /// (`\` keeps a following space).
    fn write_double_quoted(&mut self, text: &str, allow_breaks: bool) {
        let mut spaces = false;
        self.write_indicator(b"\"", true, false, false);
        let starts_with_bom = text.starts_with('\u{FEFF}');
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if starts_with_bom || !is_printable(c) || is_break(c) || c == '"' || c == '\\' {
                self.write_escape(c);
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < text.len()
                {
                    self.write_indent();
                    if chars.peek().is_some_and(|&(_, n)| n == ' ') {
                        self.put(b'\\');
                    }
                } else {
                    self.write_char(c);
                }
                spaces = true;
            } else {
                self.write_char(c);
                spaces = false;
            }
        }
        self.write_indicator(b"\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    /// The escape `yaml_emitter_write_double_quoted_scalar` writes for `c`: a short one, else
    /// `\x`, `\u` or `\U` and upper-case hex digits.
    fn write_escape(&mut self, c: char) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        self.put(b'\\');
        let short = match c {
            '\0' => Some(b'0'),
            '\u{7}' => Some(b'a'),
            '\u{8}' => Some(b'b'),
            '\t' => Some(b't'),
            '\n' => Some(b'n'),
            '\u{B}' => Some(b'v'),
            '\u{C}' => Some(b'f'),
            '\r' => Some(b'r'),
            '\u{1B}' => Some(b'e'),
            '"' => Some(b'"'),
            '\\' => Some(b'\\'),
            '\u{85}' => Some(b'N'),
            '\u{A0}' => Some(b'_'),
            '\u{2028}' => Some(b'L'),
            '\u{2029}' => Some(b'P'),
            _ => None,
        };
        if let Some(short) = short {
            self.put(short);
            return;
        }
        let v = u32::from(c);
        let (letter, digits) = match v {
            0..=0xFF => (b'x', 2),
            0x100..=0xFFFF => (b'u', 4),
            _ => (b'U', 8),
        };
        self.put(letter);
        for k in (0..digits).rev() {
            self.put(HEX[((v >> (4 * k)) & 0xF) as usize]);
        }
    }

    /// `yaml_emitter_write_literal_scalar`: `|`, the hints, then the text line by line at the
    /// scalar's indent (empty lines left empty).
    fn write_literal(&mut self, text: &str) {
        self.write_indicator(b"|", true, false, false);
        self.write_block_scalar_hints(text);
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for c in text.chars() {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.write_char(c);
                self.indention = false;
                breaks = false;
            }
        }
    }

    /// `yaml_emitter_write_block_scalar_hints`: the indentation indicator when the text starts
    /// with a space or a break, then `-` (no final break) or `+` (several final breaks, or the
    /// text is one break).
    fn write_block_scalar_hints(&mut self, text: &str) {
        if text.starts_with(|c: char| c == ' ' || is_break(c)) {
            self.write_indicator(&[b'0' + BEST_INDENT], false, false, false);
        }
        let mut from_end = text.chars().rev();
        let chomp = match (from_end.next(), from_end.next()) {
            (Some(last), _) if !is_break(last) => Some(b'-'),
            (None, _) => Some(b'-'),
            (Some(_), None) => Some(b'+'),
            (Some(_), Some(before)) if is_break(before) => Some(b'+'),
            (Some(_), Some(_)) => None,
        };
        if let Some(chomp) = chomp {
            self.write_indicator(&[chomp], false, false, false);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Scalars: styles and analysis (encode.go, emitterc.go).
// ---------------------------------------------------------------------------------------

/// `yaml_scalar_style_t`: the styles go-yaml's encoder asks for and the emitter falls back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

/// A scalar event: its text, the style the encoder asked for, and the emitter's analysis.
pub(super) struct Scalar<'t> {
    text: &'t str,
    style: Style,
    analysis: Analysis,
}

impl<'t> Scalar<'t> {
    /// `emitScalar(text, …, style)`, analysed (`yaml_emitter_analyze_event`).
    fn new(text: &'t str, style: Style) -> Self {
        Scalar {
            text,
            style,
            analysis: Analysis::of(text),
        }
    }

    /// `stringv` of a string.
    pub(super) fn string(text: &'t str) -> Self {
        Scalar::new(text, string_style(text))
    }

    /// `yaml_emitter_check_simple_key` for a scalar: one line of at most 128 bytes.
    pub(super) fn fits_simple_key(&self) -> bool {
        !self.analysis.multiline && self.text.len() <= MAX_SIMPLE_KEY_LEN
    }
}

/// `emitter.scalar_data` as `yaml_emitter_analyze_scalar` fills it, less what only flow
/// context reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

impl Analysis {
    /// `yaml_emitter_analyze_scalar`: which styles can hold `text`.
    fn of(text: &str) -> Self {
        if text.is_empty() {
            return Analysis {
                multiline: false,
                block_plain_allowed: true,
                single_quoted_allowed: true,
                block_allowed: false,
            };
        }
        let mut block_indicators = text.starts_with("---") || text.starts_with("...");
        let (mut line_breaks, mut special_characters) = (false, false);
        let (mut leading_space, mut leading_break) = (false, false);
        let (mut trailing_space, mut trailing_break) = (false, false);
        let (mut break_space, mut space_break) = (false, false);
        let (mut previous_space, mut previous_break) = (false, false);
        let mut preceded_by_whitespace = true;
        let mut first = true;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let next = chars.peek().copied();
            let last = next.is_none();
            let followed_by_whitespace = next.is_none_or(is_blank);
            let indicator = if first {
                match c {
                    '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\''
                    | '"' | '%' | '@' | '`' => true,
                    '?' | ':' | '-' => followed_by_whitespace,
                    _ => false,
                }
            } else {
                match c {
                    ':' => followed_by_whitespace,
                    '#' => preceded_by_whitespace,
                    _ => false,
                }
            };
            block_indicators |= indicator;
            special_characters |= !is_printable(c);
            if c == ' ' {
                leading_space |= first;
                trailing_space |= last;
                break_space |= previous_break;
                previous_space = true;
                previous_break = false;
            } else if is_break(c) {
                line_breaks = true;
                leading_break |= first;
                trailing_break |= last;
                space_break |= previous_space;
                previous_space = false;
                previous_break = true;
            } else {
                previous_space = false;
                previous_break = false;
            }
            preceded_by_whitespace = is_blankz(c);
            first = false;
        }
        let edges = leading_space || leading_break || trailing_space || trailing_break;
        let not_plain = edges || break_space || space_break || special_characters || line_breaks;
        Analysis {
            multiline: line_breaks,
            block_plain_allowed: !(not_plain || block_indicators),
            single_quoted_allowed: !(break_space || space_break || special_characters),
            block_allowed: !(trailing_space || space_break || special_characters),
        }
    }
}

/// `yaml_emitter_select_scalar_style` outside flow context: plain falls back to single
/// quotes, single quotes and a literal block to double quotes.
fn select_style(scalar: &Scalar<'_>, simple_key: bool) -> Style {
    let analysis = scalar.analysis;
    let mut style = scalar.style;
    if simple_key && analysis.multiline {
        style = Style::DoubleQuoted;
    }
    if style == Style::Plain
        && (!analysis.block_plain_allowed || (scalar.text.is_empty() && simple_key))
    {
        style = Style::SingleQuoted;
    }
    if style == Style::SingleQuoted && !analysis.single_quoted_allowed {
        style = Style::DoubleQuoted;
    }
    if style == Style::Literal && (!analysis.block_allowed || simple_key) {
        style = Style::DoubleQuoted;
    }
    style
}

/// `stringv`'s style: literal for a text with `\n`, plain when it reads back as this string
/// (`resolve` gives `!!str` and it is no base-60 float), else double-quoted.
fn string_style(text: &str) -> Style {
    if text.contains('\n') {
        Style::Literal
    } else if !resolves_to_other_tag(text) && !is_base60_float(text) {
        Style::Plain
    } else {
        Style::DoubleQuoted
    }
}

/// A JSON number as go-yaml writes what its decoder made of it: `intv` (an `int`), `uintv`
/// (a `uint64` past `int`) or `floatv` (a `float64`, `strconv.FormatFloat(f, 'g', -1, 64)`).
fn number_text(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        n.as_f64().map(format_float).unwrap_or_default()
    }
}

/// `floatv`: Go's `strconv.FormatFloat(f, 'g', -1, 64)`, the shortest digits that read back
/// as `f` (the nearest such, a tie to even), in `%e` form (`1e+06`, `1.5e-07`: at least two
/// exponent digits) when the decimal exponent is below -4 or at least 6 (the shortest form's
/// `eprec`), else in `%f` form; the infinities and NaN as `.inf`, `-.inf`, `.nan`.
pub(super) fn format_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.to_owned();
    }
    let (digits, exp) = shortest_digits(f.abs());
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        format_e(&mut out, &digits, exp);
    } else {
        format_f(&mut out, &digits, exp + 1);
    }
    out
}

/// The digits and decimal exponent (`d.ddd × 10^exp`) of Go's shortest form of `f >= 0`
/// (`ryuFtoaShortest`). Rust's `{:e}` finds as few digits, but breaks a tie between two
/// nearest ones upward where Go takes the even one, which Rust's exact `{:.N$e}` does.
fn shortest_digits(f: f64) -> (Vec<u8>, i64) {
    let shortest = format!("{f:e}");
    let (digits, exp) = split_exponent(&shortest);
    let rounded = format!("{f:.*e}", digits.len().saturating_sub(1));
    if rounded.parse::<f64>() == Ok(f) {
        split_exponent(&rounded)
    } else {
        (digits, exp)
    }
}

/// The digits and the exponent of Rust's `d.ddde[-]x`.
fn split_exponent(formatted: &str) -> (Vec<u8>, i64) {
    let (mantissa, exponent) = formatted.split_once('e').unwrap_or((formatted, "0"));
    let digits = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    (digits, exponent.parse().unwrap_or(0))
}

/// Go's `fmtE` with all of `digits`: `d.ddde±dd`.
fn format_e(out: &mut String, digits: &[u8], exp: i64) {
    let (first, rest) = digits.split_first().unwrap_or((&b'0', &[]));
    out.push(char::from(*first));
    if !rest.is_empty() {
        out.push('.');
        out.extend(rest.iter().map(|&d| char::from(d)));
    }
    out.push('e');
    out.push(if exp < 0 { '-' } else { '+' });
    let exp = exp.unsigned_abs();
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
}

/// Go's `fmtF` with all of `digits` and the decimal point after `dp` of them.
fn format_f(out: &mut String, digits: &[u8], dp: i64) {
    let digit_at = |j: i64| {
        usize::try_from(j)
            .ok()
            .and_then(|j| digits.get(j))
            .map_or('0', |&d| char::from(d))
    };
    if dp > 0 {
        out.extend((0..dp).map(digit_at));
    } else {
        out.push('0');
    }
    let nd = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    if nd > dp {
        out.push('.');
        out.extend((dp..nd).map(digit_at));
    }
}

/// `is_printable` of a character: `\n`, printable ASCII, and the BMP from U+00A0 on, less
/// surrogates, U+FEFF, U+FFFE and U+FFFF. Tabs, other controls and everything past the BMP
/// are not.
fn is_printable(c: char) -> bool {
    matches!(c, '\n' | ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        && c != '\u{FEFF}'
}

/// `is_break`: CR, LF, NEL, LS, PS.
fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `is_blank`: a space or a tab.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// `is_blankz`: a blank, a break or NUL.
fn is_blankz(c: char) -> bool {
    is_blank(c) || is_break(c) || c == '\0'
}

// ---------------------------------------------------------------------------------------

/// The string go-yaml's scanner reads from `s` written as a JSON string value by Go's
/// `encoding/json` (`yaml_parser_scan_flow_scalar`, double-quoted). What `encoding/json`
/// escapes comes back as it was, and so do raw spaces; but a raw NEL (U+0085, which it does
/// not escape) is a line break there, folded with the spaces around it: such a run of spaces
/// and NELs becomes one space after a single NEL, else a `\n` for each NEL after the first.
/// (Keys are left as they are: in a key, where a flow mapping's implicit key cannot span
/// lines, a NEL makes `JSONToYAML` fail.)
fn scanned(s: &str) -> Cow<'_, str> {
    if !s.contains('\u{85}') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut spaces = 0;
    let mut breaks = 0;
    for c in s.chars() {
        match c {
            ' ' if breaks == 0 => spaces += 1,
            ' ' => {}
            '\u{85}' => {
                spaces = 0;
                breaks += 1;
            }
            _ => {
                join_blanks(&mut out, spaces, breaks);
                (spaces, breaks) = (0, 0);
                out.push(c);
            }
        }
    }
    join_blanks(&mut out, spaces, breaks);
    Cow::Owned(out)
}

/// The scanner's "join the whitespaces or fold line breaks" for `spaces` spaces (before any
/// break) and `breaks` line breaks.
fn join_blanks(out: &mut String, spaces: usize, breaks: usize) {
    match breaks {
        0 => out.extend(std::iter::repeat_n(' ', spaces)),
        1 => out.push(' '),
        n => out.extend(std::iter::repeat_n('\n', n - 1)),
    }
}
