//! Short runs (digits, varints, a `Time`) built in a fixed-size array on the stack and
//! appended to the output at once.

/// Appends `buf[..len]` as a copy of the whole fixed-size `buf` cut back to `len`: a few
/// register moves where a copy of a length known only at run time is a call to `memcpy`,
/// which lists made a dozen times per item.
#[inline(always)]
pub fn append_prefix<const N: usize>(out: &mut Vec<u8>, buf: &[u8; N], len: usize) {
    let end = out.len() + len.min(N);
    out.extend_from_slice(buf);
    out.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the prefix lands, after what was there; a length past the array is the array.
    #[test]
    fn appends_only_the_prefix() {
        let mut out = b"ab".to_vec();
        append_prefix(&mut out, b"xyz\0\0", 3);
        assert_eq!(out, b"abxyz");
        append_prefix(&mut out, b"12", 0);
        assert_eq!(out, b"abxyz");
        append_prefix(&mut out, b"12", 9);
        assert_eq!(out, b"abxyz12");
    }
}
