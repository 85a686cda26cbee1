//! The HTTP/1.1 the kubelet client speaks: one `GET` request, the response head, and the
//! body's framing (Content-Length, chunked, or until the connection closes).
//!
//! Everything here is synchronous and works on byte slices; the connection and the body
//! budget are the caller's. Hostile peers are bounded: a head (or a trailer block) larger
//! than [`MAX_HEAD_BYTES`], more than [`MAX_HEADERS`] headers or a chunk-size line longer
//! than [`MAX_CHUNK_LINE_BYTES`] is an error, never unbounded growth.

use std::fmt;

use http::HeaderValue;

/// Largest response head (status line and headers) accepted, and largest trailer block.
pub(super) const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Most response headers accepted (hyper's default).
pub(super) const MAX_HEADERS: usize = 100;

/// Longest chunk-size line (size and extensions) accepted.
pub(super) const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;

/// Appends `GET path HTTP/1.1` with `host` (and `authorization`, `accept-encoding: gzip`
/// when `gzip`, and `connection: close` when the connection is not to be kept) to `out`.
pub(super) fn request(
    out: &mut Vec<u8>,
    path: &str,
    host: &str,
    authorization: Option<&HeaderValue>,
    gzip: bool,
    close: bool,
) {
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(value) = authorization {
        out.extend_from_slice(b"authorization: ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if gzip {
        // What Go's client (metrics-server's) sends unless compression is disabled.
        out.extend_from_slice(b"accept-encoding: gzip\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How the body of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the peer closes the connection (neither of the above).
    Close,
}

/// How the body's content is encoded (`Content-Encoding`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Coding {
    /// None (or only `identity`).
    Identity,
    /// `gzip` (or `x-gzip`).
    Gzip,
    /// Anything else, as sent: a body we cannot read.
    Other(Box<str>),
}

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Head {
    /// The status code.
    pub(super) status: u16,
    /// How the body is delimited.
    pub(super) framing: Framing,
    /// How the body's content is encoded.
    pub(super) coding: Coding,
    /// Whether the connection may carry another request after this response (HTTP/1.1
    /// without `Connection: close`, a body with its own framing).
    pub(super) reusable: bool,
    /// Length of the head in bytes, the blank line included: the body starts there.
    pub(super) len: usize,
}

/// A response that is not HTTP/1.1 as we accept it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum HeadError {
    /// The head is larger than [`MAX_HEAD_BYTES`] or has more than [`MAX_HEADERS`] headers.
    TooLarge,
    /// The head does not parse, or its framing headers are contradictory.
    Invalid(String),
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::TooLarge => write!(
                f,
                "response head larger than {MAX_HEAD_BYTES} bytes or with more than {MAX_HEADERS} headers"
            ),
            HeadError::Invalid(why) => write!(f, "invalid HTTP response: {why}"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Parses the response head at the start of `buf`; `Ok(None)` while it is incomplete (and
/// still within [`MAX_HEAD_BYTES`]). Informational (1xx) heads are returned like any other:
/// the caller skips them.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Invalid(e.to_string())),
    };
    if len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let status = response.code.unwrap_or_default();
    let http11 = response.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = !http11;
    let mut codings: Vec<&[u8]> = Vec::new();
    for header in response.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let value = parse_length(header.value).ok_or_else(|| {
                HeadError::Invalid(format!(
                    "bad Content-Length {:?}",
                    String::from_utf8_lossy(header.value)
                ))
            })?;
            if length.is_some_and(|seen| seen != value) {
                return Err(HeadError::Invalid("conflicting Content-Length".into()));
            }
            length = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            // Chunked only counts as the last coding.
            chunked = last_token(header.value).eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case("content-encoding") {
            codings.extend(
                header
                    .value
                    .split(|&b| b == b',')
                    .map(<[u8]>::trim_ascii)
                    .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity")),
            );
        } else if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    close = false;
                }
            }
        }
    }
    let framing = if transfer_encoding {
        // Transfer-Encoding wins over Content-Length; the pair is a smuggling smell, so the
        // connection is not reused after it (RFC 9112 6.3).
        if length.is_some() {
            close = true;
        }
        if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        }
    } else {
        match length {
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    let coding = match codings[..] {
        [] => Coding::Identity,
        [c] if c.eq_ignore_ascii_case(b"gzip") || c.eq_ignore_ascii_case(b"x-gzip") => Coding::Gzip,
        _ => Coding::Other(
            String::from_utf8_lossy(&codings.join(&b", "[..]))
                .chars()
                .take(64)
                .collect(),
        ),
    };
    Ok(Some(Head {
        status,
        framing,
        coding,
        reusable: !close && framing != Framing::Close,
        len,
    }))
}

/// Whether `buf` may hold a complete head, looking only at the bytes from `from` on (and
/// the two before): a blank line (`\n\n` or `\n\r\n`) or more than [`MAX_HEAD_BYTES`].
/// Lets a head that trickles in be parsed once, not at every read.
pub(super) fn head_may_be_complete(buf: &[u8], from: usize) -> bool {
    if buf.len() > MAX_HEAD_BYTES {
        return true;
    }
    let start = from.saturating_sub(2).min(buf.len());
    memchr::memchr_iter(b'\n', &buf[start..]).any(|i| {
        let rest = &buf[start + i + 1..];
        rest.first() == Some(&b'\n') || rest.starts_with(b"\r\n")
    })
}

/// A Content-Length value: ASCII digits only (no sign, no spaces inside), no overflow.
fn parse_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// The last comma-separated token of a header value, trimmed.
fn last_token(value: &[u8]) -> &[u8] {
    value
        .rsplit(|&b| b == b',')
        .next()
        .unwrap_or_default()
        .trim_ascii()
}

/// A chunked body that does not follow the chunked coding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChunkError(&'static str);

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid chunked body: {}", self.0)
    }
}

impl std::error::Error for ChunkError {}

/// Decodes `Transfer-Encoding: chunked` incrementally: feed it whatever arrived, take the
/// data slices it hands out, until [`Chunked::done`].
#[derive(Debug)]
pub(super) struct Chunked {
    state: State,
    /// Bytes of the current chunk-size line, or of the trailer block.
    line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size (`digits` so far).
    Size { size: u64, digits: u8 },
    /// After the size: extensions or whitespace, up to CR.
    Extension { size: u64 },
    /// The LF after a size line.
    SizeLf { size: u64 },
    /// This many data bytes still to come.
    Data(u64),
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// At the start of a trailer line (or of the final blank line).
    TrailerStart,
    /// Inside a trailer line, up to CR.
    Trailer,
    /// The LF ending a trailer line.
    TrailerLf,
    /// The LF of the final blank line.
    EndLf,
    /// The body is complete.
    Done,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: State::Size { size: 0, digits: 0 },
            line: 0,
        }
    }
}

impl Chunked {
    /// Whether the last chunk and the trailers have been read.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from the front of `input` up to the next data bytes and returns
    /// them (consumed too); `Ok(None)` once `input` is used up or the body is complete
    /// (bytes after the end stay in `input`).
    pub(super) fn next<'a>(
        &mut self,
        input: &mut &'a [u8],
    ) -> Result<Option<&'a [u8]>, ChunkError> {
        loop {
            if let State::Data(remaining) = self.state {
                if input.is_empty() {
                    return Ok(None);
                }
                let n = usize::try_from(remaining).map_or(input.len(), |r| r.min(input.len()));
                let (data, rest) = input.split_at(n);
                *input = rest;
                let left = remaining - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data(left)
                };
                return Ok(Some(data));
            }
            if self.state == State::Done {
                return Ok(None);
            }
            let Some((&b, rest)) = input.split_first() else {
                return Ok(None);
            };
            *input = rest;
            self.state = self.step(b)?;
        }
    }

    /// One framing byte.
    fn step(&mut self, b: u8) -> Result<State, ChunkError> {
        Ok(match self.state {
            State::Size { size, digits } => {
                self.line += 1;
                if self.line > MAX_CHUNK_LINE_BYTES {
                    return Err(ChunkError("chunk-size line too long"));
                }
                match (b as char).to_digit(16) {
                    Some(d) => {
                        if digits >= 16 {
                            return Err(ChunkError("chunk size too large"));
                        }
                        State::Size {
                            size: size << 4 | u64::from(d),
                            digits: digits + 1,
                        }
                    }
                    None if digits == 0 => return Err(ChunkError("missing chunk size")),
                    None => match b {
                        b'\r' => State::SizeLf { size },
                        b';' | b' ' | b'\t' => State::Extension { size },
                        _ => return Err(ChunkError("bad chunk size")),
                    },
                }
            }
            State::Extension { size } => {
                self.line += 1;
                if self.line > MAX_CHUNK_LINE_BYTES {
                    return Err(ChunkError("chunk-size line too long"));
                }
                match b {
                    b'\r' => State::SizeLf { size },
                    b'\n' => return Err(ChunkError("bare LF in chunk-size line")),
                    _ => State::Extension { size },
                }
            }
            State::SizeLf { size } => {
                if b != b'\n' {
                    return Err(ChunkError("chunk-size line not ended by CRLF"));
                }
                self.line = 0;
                if size == 0 {
                    State::TrailerStart
                } else {
                    State::Data(size)
                }
            }
            State::DataCr if b == b'\r' => State::DataLf,
            State::DataLf if b == b'\n' => State::Size { size: 0, digits: 0 },
            State::DataCr | State::DataLf => {
                return Err(ChunkError("chunk data not followed by CRLF"));
            }
            State::TrailerStart | State::Trailer | State::TrailerLf | State::EndLf => {
                self.line += 1;
                if self.line > MAX_HEAD_BYTES {
                    return Err(ChunkError("trailers too large"));
                }
                match (self.state, b) {
                    (State::TrailerStart, b'\r') => State::EndLf,
                    (State::EndLf, b'\n') => State::Done,
                    (State::EndLf, _) => return Err(ChunkError("trailers not ended by CRLF")),
                    (State::Trailer, b'\r') => State::TrailerLf,
                    (State::TrailerLf, b'\n') => State::TrailerStart,
                    (State::TrailerLf, _) => {
                        return Err(ChunkError("trailer line not ended by CRLF"));
                    }
                    (_, b'\n') => return Err(ChunkError("bare LF in trailers")),
                    _ => State::Trailer,
                }
            }
            State::Data(_) | State::Done => self.state,
        })
    }
}

#[cfg(test)]
mod tests;
