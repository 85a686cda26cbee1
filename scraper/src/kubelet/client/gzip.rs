//! Bodies a kubelet gzips (`Content-Encoding: gzip`). Kubelets serve `/metrics/resource`
//! through Prometheus' handler, which gzips when the request's `Accept-Encoding` allows it,
//! and Go's HTTP client (metrics-server's) asks so by default: about 8x fewer bytes per scrape
//! for the kubelet's compression and our inflation.
//!
//! A gzip body is read whole (its framing and size bound as any body), then inflated here
//! into a buffer the caller grows within its limit, so a small body that inflates to more
//! than the limit (a "gzip bomb") fails at the limit, never past it. Members are read one
//! after another until the input ends, as Go's `gzip.Reader` reads a multistream body; each
//! member's header (and its header CRC, when it has one), CRC-32 and length are checked.
//!
//! A body of one member, the shape a kubelet sends, is inflated in one call to libdeflate
//! (`libdeflater`), which decodes the whole stream into a buffer of its trailer's size with no
//! window of its own to keep: ~35 % fewer instructions than zlib-rs on the kubelet's body, and
//! 11 % fewer for the whole scrape. Any other body (several members, a size past the room, a
//! check that fails) goes through zlib's streaming reader, which also names what is wrong with
//! a bad one.
//!
//! Both states are kept per thread and reused for the next body rather than allocated per
//! scrape (allocated and freed at every scrape, zlib's state and its 32 KiB window cost ~30
//! KiB of RSS per node at 1,000 nodes in glibc's arenas); zlib's only once a body needed it.
//! So is the last inflated body's buffer once its body is dropped ([`keep`]): the next body
//! is written over it, with no allocation and no zeroing. That buffer is outside the bodies'
//! byte budget (which counts each body's own size), at most [`KEEP_AT_MOST`] a thread.

use std::cell::RefCell;

use flate2::{Crc, Decompress, FlushDecompress, Status};
use libdeflater::Decompressor;

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

thread_local! {
    /// A raw deflate state (with its window) that a finished [`Gunzip`] leaves for the next.
    static SPARE: RefCell<Option<Decompress>> = const { RefCell::new(None) };
    /// libdeflate's decompressor (its decoding tables, ~11 KiB) for [`one_member`].
    static ONE_SHOT: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    /// The buffer of a body inflated on this thread and dropped ([`keep`]), for the next
    /// [`one_member`] body: written over, not allocated and zeroed again.
    static KEPT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The largest buffer [`keep`] keeps for the next body: a kubelet's answer is ~40 KB for 30
/// pods, ~150 KB for 110; a larger one (at most the body limit) is freed, not held.
pub const KEEP_AT_MOST: usize = 1 << 20;

/// Keeps an inflated body's buffer, once the body is parsed and dropped, for the next body
/// inflated on this thread (one buffer a thread, at most [`KEEP_AT_MOST`] bytes).
pub fn keep(buffer: Vec<u8>) {
    if buffer.capacity() <= KEEP_AT_MOST {
        KEPT.with(|k| *k.borrow_mut() = buffer);
    }
}

/// Where a [`Gunzip`] is in the current member.
enum Member {
    /// At the header starting at this input offset.
    Header(usize),
    /// Inflating the data that starts at this input offset, with the CRC-32 (and length) of
    /// what it inflated so far.
    Data { at: usize, crc: Crc },
}

/// Inflates a whole gzip body into an output buffer, stepping whenever the buffer is full.
pub struct Gunzip {
    inflate: Option<Decompress>,
    member: Member,
}

impl Default for Gunzip {
    fn default() -> Self {
        let spare = SPARE.with(|s| s.borrow_mut().take());
        Gunzip {
            inflate: spare,
            member: Member::Header(0),
        }
    }
}

impl Drop for Gunzip {
    /// Leaves the state for the next body on this thread (which resets it at its first
    /// member's header).
    fn drop(&mut self) {
        if let Some(inflate) = self.inflate.take() {
            SPARE.with(|s| {
                s.borrow_mut().get_or_insert(inflate);
            });
        }
    }
}

impl Gunzip {
    /// Inflates `input` (the whole body, the same slice at every step) into the spare
    /// capacity of `out`. An empty body is an empty answer, as Go's client reads it.
    pub fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Step, GzipError> {
        loop {
            match &mut self.member {
                Member::Header(at) => {
                    let at = *at;
                    if at == input.len() {
                        return Ok(Step::Done);
                    }
                    let len = header_len(input.get(at..).unwrap_or_default())?;
                    let inflate = self.inflate.get_or_insert_with(|| Decompress::new(false));
                    inflate.reset(false);
                    self.member = Member::Data {
                        at: at + len,
                        crc: Crc::new(),
                    };
                }
                Member::Data { at, crc } => {
                    if out.len() == out.capacity() {
                        return Ok(Step::Full);
                    }
                    let inflate = self.inflate.get_or_insert_with(|| Decompress::new(false));
                    let read = usize::try_from(inflate.total_in()).unwrap_or(usize::MAX);
                    let rest = input.get(at.saturating_add(read)..).unwrap_or_default();
                    let produced = out.len();
                    let status = inflate
                        .decompress_vec(rest, out, FlushDecompress::None)
                        .map_err(|e| GzipError::Corrupt(e.to_string()))?;
                    let consumed = usize::try_from(inflate.total_in()).unwrap_or(usize::MAX) - read;
                    crc.update(out.get(produced..).unwrap_or_default());
                    match status {
                        Status::StreamEnd => {
                            let end = at.saturating_add(read + consumed);
                            let trailer = input
                                .get(end..end.saturating_add(8))
                                .ok_or(GzipError::Truncated)?;
                            if word(trailer, 0) != crc.sum() {
                                return Err(GzipError::Corrupt("CRC-32 does not match".into()));
                            }
                            // ISIZE is the length modulo 2^32, as the CRC's amount.
                            if word(trailer, 4) != crc.amount() {
                                return Err(GzipError::Corrupt("length does not match".into()));
                            }
                            self.member = Member::Header(end + 8);
                        }
                        Status::Ok | Status::BufError => {
                            let stuck = consumed == 0 && out.len() == produced;
                            if stuck && out.len() < out.capacity() {
                                // Room to write and nothing consumed: the input ran out.
                                return Err(GzipError::Truncated);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Inflates `input` in one call when it is provably one member of at most `room` bytes, into
/// this thread's kept buffer ([`keep`]) or a new one; `None` for any other body or any check
/// that fails (the streaming reader then reads it from the start, and names what is wrong
/// with a bad one).
///
/// libdeflate reads the first member and checks its CRC-32 and length against its trailer, the
/// 8 bytes right after its deflate data, but does not say where those were. So the body's last
/// 4 bytes must be that length, and must not appear earlier in the body after the header: then
/// the member's length, and so its trailer, is at the body's end, and the member is the whole
/// body. Several members, or bytes after the one, fail either check (a last length unlike the
/// first's, or the first's appearing before the end).
fn one_member(input: &[u8], room: usize) -> Option<Vec<u8>> {
    let start = header_len(input).ok()?;
    let trailer = input
        .len()
        .checked_sub(8)
        .filter(|&end| end > start)
        .and_then(|end| input.get(end..))?;
    let size = usize::try_from(word(trailer, 4))
        .ok()
        .filter(|&size| size <= room)?;
    let mut out = KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()));
    // The kept buffer's bytes are the last body's, all written over below; only growth is
    // zeroed.
    if out.len() < size {
        out.resize(size, 0);
    } else {
        out.truncate(size);
    }
    let inflated = ONE_SHOT.with(|d| {
        d.borrow_mut()
            .get_or_insert_with(Decompressor::new)
            .gzip_decompress(input, &mut out)
    });
    let length = trailer.get(4..).unwrap_or_default();
    let before = input.get(start..input.len() - 1).unwrap_or_default();
    if inflated.is_ok_and(|n| n == size) && memchr::memmem::find(before, length).is_none() {
        Some(out)
    } else {
        keep(out);
        None
    }
}

/// The little-endian word at `i` in a gzip trailer (CRC-32 at 0, ISIZE at 4).
fn word(trailer: &[u8], i: usize) -> u32 {
    trailer
        .get(i..i + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes)
}

/// The length of the gzip member header (RFC 1952) at the start of `input`.
fn header_len(input: &[u8]) -> Result<usize, GzipError> {
    const FHCRC: u8 = 0x02;
    const FEXTRA: u8 = 0x04;
    const FNAME: u8 = 0x08;
    const FCOMMENT: u8 = 0x10;
    let corrupt = |why: &str| GzipError::Corrupt(format!("invalid header: {why}"));
    let fixed = input.get(..10).ok_or(GzipError::Truncated)?;
    if fixed[..2] != [0x1f, 0x8b] {
        return Err(corrupt("not a gzip member"));
    }
    if fixed[2] != 8 {
        return Err(corrupt("compression method is not deflate"));
    }
    let flags = fixed[3];
    if flags & 0xe0 != 0 {
        return Err(corrupt("reserved flags set"));
    }
    let mut len = 10;
    if flags & FEXTRA != 0 {
        let xlen = input.get(len..len + 2).ok_or(GzipError::Truncated)?;
        len += 2 + usize::from(u16::from_le_bytes([xlen[0], xlen[1]]));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let rest = input.get(len..).ok_or(GzipError::Truncated)?;
            len += memchr::memchr(0, rest).ok_or(GzipError::Truncated)? + 1;
        }
    }
    if flags & FHCRC != 0 {
        let stored = input.get(len..len + 2).ok_or(GzipError::Truncated)?;
        let mut crc = Crc::new();
        crc.update(input.get(..len).unwrap_or_default());
        if u16::from_le_bytes([stored[0], stored[1]]) != crc.sum() as u16 {
            return Err(corrupt("header CRC does not match"));
        }
        len += 2;
    }
    if len > input.len() {
        return Err(GzipError::Truncated);
    }
    Ok(len)
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

/// What [`Inflate::run`] needs next.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing: the body is inflated, within the limit.
    Nothing,
    /// Room for this many bytes in all (the caller takes it from its budget, then calls
    /// [`Inflate::grow`]).
    Room(usize),
    /// The body inflates past the limit.
    OverLimit,
}

/// A gzip body inflating into a buffer that starts at [`size_hint`] and doubles, never past
/// `limit`: the policy the client (which takes each growth's room from its budget first) and
/// [`gunzip`] share.
pub struct Inflate {
    gunzip: Gunzip,
    out: Vec<u8>,
    /// The output's first size ([`size_hint`]), until the output is allocated.
    first: usize,
    limit: usize,
    /// Whether the body was tried as one member ([`one_member`]).
    tried: bool,
}

impl Inflate {
    /// Ready to inflate `input` (the whole body) into at most `limit` bytes.
    pub fn new(input: &[u8], limit: usize) -> Self {
        Inflate {
            gunzip: Gunzip::default(),
            out: Vec::new(),
            first: size_hint(input, limit).max(1),
            limit,
            tried: false,
        }
    }

    /// The room the output holds now (its first size, before any growth).
    pub fn capacity(&self) -> usize {
        self.out.capacity().max(self.first)
    }

    /// Inflates `input` (the same slice at every call) until it is done, past the limit, or
    /// the output needs room.
    pub fn run(&mut self, input: &[u8]) -> Result<Need, GzipError> {
        if !self.tried {
            self.tried = true;
            if let Some(out) = one_member(input, self.first) {
                self.out = out;
                return Ok(Need::Nothing);
            }
            self.out.reserve_exact(self.first);
        }
        Ok(match self.gunzip.step(input, &mut self.out)? {
            Step::Done if self.out.len() <= self.limit => Need::Nothing,
            Step::Done => Need::OverLimit,
            Step::Full if self.out.len() >= self.limit => Need::OverLimit,
            Step::Full => Need::Room(self.out.capacity().saturating_mul(2).clamp(1, self.limit)),
        })
    }

    /// Grows the output to `capacity` bytes in all (what [`Need::Room`] asked for).
    pub fn grow(&mut self, capacity: usize) {
        self.out
            .reserve_exact(capacity.saturating_sub(self.out.len()));
    }

    /// The inflated body.
    pub fn into_inner(self) -> Vec<u8> {
        self.out
    }
}

/// Inflates `input` whole into at most `limit` bytes; `None` past it (for tests, benchmarks
/// and fuzzing; the client runs [`Inflate`] within its byte budget instead).
pub fn gunzip(input: &[u8], limit: usize) -> Result<Option<Vec<u8>>, GzipError> {
    inflate_whole(Inflate::new(input, limit), input)
}

/// Runs `inflate` over `input` to its end, growing the output whenever it asks (no budget).
fn inflate_whole(mut inflate: Inflate, input: &[u8]) -> Result<Option<Vec<u8>>, GzipError> {
    loop {
        match inflate.run(input)? {
            Need::Nothing => return Ok(Some(inflate.into_inner())),
            Need::OverLimit => return Ok(None),
            Need::Room(capacity) => inflate.grow(capacity),
        }
    }
}

#[cfg(test)]
mod tests;
