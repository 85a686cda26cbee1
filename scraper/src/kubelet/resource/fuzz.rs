//! Test support: a deterministic byte-mutation "fuzzer" for the kubelet payload parsers,
//! without a dependency: an xorshift RNG and random edits of a seed payload.

/// xorshift64*: deterministic, no dependency.
pub(in crate::kubelet) struct Rng(pub(in crate::kubelet) u64);

impl Rng {
    pub(in crate::kubelet) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(in crate::kubelet) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes that make parsers take unusual paths.
const INTERESTING: &[u8] = b"{}\",=\\\n\r #-+.eE0123456789 \t\xff\xc3nNaIf_:";

/// Applies 1 to 8 random edits (flip, insert, delete, duplicate a span) to `body`.
pub(in crate::kubelet) fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(body.len() + 1);
        match rng.below(5) {
            0 if at < body.len() => body[at] ^= 1 << rng.below(8),
            1 => body.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            2 if at < body.len() => {
                body.remove(at);
            }
            3 if at < body.len() => body[at] = INTERESTING[rng.below(INTERESTING.len())],
            _ => {
                let len = rng.below(64).min(body.len() - at.min(body.len()));
                let span: Vec<u8> = body[at..at + len].to_vec();
                let to = rng.below(body.len() + 1);
                body.splice(to..to, span);
            }
        }
    }
}
