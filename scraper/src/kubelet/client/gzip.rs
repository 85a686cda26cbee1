//! Bodies a kubelet gzips (`Content-Encoding: gzip`). Kubelets serve `/metrics/resource`
//! through Prometheus' handler, which gzips when the request's `Accept-Encoding` allows it,
//! and Go's HTTP client (metrics-server's) asks so by default: about 8x fewer bytes per scrape
//! for the kubelet's compression and our inflation.
//!
//! A gzip body is read whole (its framing and size bound as any body), then inflated here
//! into a buffer the caller grows within its limit, so a small body that inflates to more
//! than the limit (a "gzip bomb") fails at the limit, never past it. Members are read one
//! after another until the input ends, as Go's `gzip.Reader` reads a multistream body; the
//! CRC-32 and length of each member are checked.

use flate2::{Decompress, FlushDecompress, Status};

/// Why a gzip body could not be inflated.
#[derive(Debug, thiserror::Error)]
pub enum GzipError {
    /// The bytes are not gzip, or a member's CRC-32 or length does not match its data.
    #[error("gzip: {0}")]
    Corrupt(String),
    /// The body ends inside a member.
    #[error("gzip: the body ends inside a compressed member")]
    Truncated,
}

/// What [`Gunzip::step`] needs next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Every member is inflated.
    Done,
    /// The output is full: grow it (or fail it at the limit) and step again.
    Full,
}

/// Inflates a whole gzip body into an output buffer, stepping whenever the buffer is full.
pub struct Gunzip {
    member: Decompress,
    /// Where the current member starts in the input.
    start: usize,
}

impl Default for Gunzip {
    fn default() -> Self {
        Gunzip {
            member: member(),
            start: 0,
        }
    }
}

fn member() -> Decompress {
    // 15 bits of window, gzip header and trailer (zlib's windowBits 31).
    Decompress::new_gzip(15)
}

impl Gunzip {
    /// Inflates `input` (the whole body, the same slice at every step) into the spare
    /// capacity of `out`. An empty body is an empty answer, as Go's client reads it.
    pub fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Step, GzipError> {
        loop {
            let at = self.position();
            let rest = input.get(at..).unwrap_or_default();
            if rest.is_empty() && at == self.start {
                // Between members (or an empty body): the end.
                return Ok(Step::Done);
            }
            if out.len() == out.capacity() {
                return Ok(Step::Full);
            }
            let produced = out.len();
            let status = self
                .member
                .decompress_vec(rest, out, FlushDecompress::None)
                .map_err(|e| GzipError::Corrupt(e.to_string()))?;
            match status {
                Status::StreamEnd => {
                    // The next member, if any, starts where this one's trailer ended.
                    self.start = self.position();
                    self.member = member();
                }
                Status::Ok | Status::BufError => {
                    let stuck = self.position() == at && out.len() == produced;
                    if stuck && out.len() < out.capacity() {
                        // Room to write and nothing consumed: the input ran out mid-member.
                        return Err(GzipError::Truncated);
                    }
                }
            }
        }
    }

    fn position(&self) -> usize {
        self.start
            .saturating_add(usize::try_from(self.member.total_in()).unwrap_or(usize::MAX))
    }
}

/// A first size for the inflated body: the last member's own length from its trailer
/// (`ISIZE`, exact for the single member a kubelet sends), at most `limit`, and at most what
/// deflate can expand `input` to (~1032x), so a forged trailer cannot reserve more than the
/// data could fill.
pub fn size_hint(input: &[u8], limit: usize) -> usize {
    const MAX_RATIO: usize = 1032;
    let trailer = input
        .len()
        .checked_sub(4)
        .and_then(|at| input.get(at..))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes);
    usize::try_from(trailer)
        .unwrap_or(usize::MAX)
        .min(input.len().saturating_mul(MAX_RATIO))
        .min(limit)
}

/// Inflates `input` whole into at most `limit` bytes (for tests and benchmarks; the client
/// grows its buffer within its byte budget instead).
pub fn gunzip(input: &[u8], limit: usize) -> Result<Option<Vec<u8>>, GzipError> {
    let mut out = Vec::with_capacity(size_hint(input, limit).max(1));
    let mut gunzip = Gunzip::default();
    loop {
        match gunzip.step(input, &mut out)? {
            Step::Done => return Ok((out.len() <= limit).then_some(out)),
            Step::Full if out.len() >= limit => return Ok(None),
            Step::Full => {
                let grown = out.capacity().saturating_mul(2).clamp(1, limit);
                out.reserve_exact(grown - out.len());
            }
        }
    }
}

#[cfg(test)]
mod tests;
