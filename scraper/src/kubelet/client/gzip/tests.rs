#![allow(clippy::unwrap_used)]

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;

use super::*;

fn gz(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Metric-like text, so it compresses as a kubelet's answer does.
fn text(lines: usize) -> Vec<u8> {
    (0..lines)
        .map(|i| {
            format!(
                "container_memory_working_set_bytes{{container=\"c{i}\",namespace=\"ns\",pod=\"p{i}\"}} {} 1700000000000\n",
                i * 4096
            )
        })
        .collect::<String>()
        .into_bytes()
}

#[test]
fn a_kubelet_sized_body_inflates_to_its_text() {
    let plain = text(400);
    let body = gz(&plain, 6);
    assert!(body.len() * 5 < plain.len(), "the sample should compress");
    assert_eq!(size_hint(&body, usize::MAX), plain.len());
    assert_eq!(gunzip(&body, plain.len()).unwrap().unwrap(), plain);
}

#[test]
fn members_one_after_another_inflate_to_their_texts_in_order() {
    let (a, b) = (text(3), b"# EOF\n".to_vec());
    let mut body = gz(&a, 1);
    body.extend(gz(&b, 9));
    body.extend(gz(b"", 6));
    assert_eq!(gunzip(&body, 1 << 20).unwrap().unwrap(), [a, b].concat());
}

#[test]
fn an_empty_body_is_an_empty_answer() {
    assert_eq!(gunzip(b"", 1 << 20).unwrap().unwrap(), b"");
}

#[test]
fn a_body_cut_inside_a_member_is_truncated() {
    let body = gz(&text(50), 6);
    for cut in [1, 10, body.len() / 2, body.len() - 1] {
        let err = gunzip(&body[..cut], 1 << 20).unwrap_err();
        assert!(matches!(err, GzipError::Truncated), "cut at {cut}: {err}");
    }
}

#[test]
fn a_wrong_checksum_or_length_or_a_foreign_tail_is_corrupt() {
    let good = gz(&text(50), 6);
    let n = good.len();
    let mut crc = good.clone();
    crc[n - 8] ^= 1;
    let mut len = good.clone();
    len[n - 1] ^= 1;
    let mut tail = good.clone();
    tail.extend_from_slice(&[0; 16]);
    let mut data = good.clone();
    data[n / 2] ^= 0x55;
    for (what, body) in [("crc", crc), ("isize", len), ("tail", tail), ("data", data)] {
        match gunzip(&body, 1 << 20) {
            Err(GzipError::Corrupt(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    let err = gunzip(b"plain text, not gzip\n", 1 << 20).unwrap_err();
    assert!(err.to_string().starts_with("gzip: "), "{err}");
}

#[test]
fn a_small_body_that_inflates_past_the_limit_stops_at_the_limit() {
    // 16 MiB of zeros in ~160 KiB (level 1): the limit is 1 MiB.
    let bomb = gz(&vec![0u8; 16 << 20], 1);
    let limit = 1 << 20;
    assert!(bomb.len() < limit / 4, "{}", bomb.len());
    let mut inflate = Inflate::new(&bomb, limit);
    assert!(inflate.capacity() <= limit);
    loop {
        match inflate.run(&bomb).unwrap() {
            Need::Nothing => panic!("inflated {} bytes past the limit", inflate.out.len()),
            Need::OverLimit => break,
            Need::Room(capacity) => {
                assert!(capacity <= limit, "asked for {capacity}");
                inflate.grow(capacity);
            }
        }
    }
    assert_eq!(inflate.out.len(), limit);
    assert!(inflate.out.capacity() <= limit + 4096);
    assert_eq!(gunzip(&bomb, limit).unwrap(), None);
}

#[test]
fn a_body_of_exactly_the_limit_passes_and_one_byte_more_does_not() {
    let plain = text(100);
    let body = gz(&plain, 6);
    assert_eq!(gunzip(&body, plain.len()).unwrap().unwrap(), plain);
    assert_eq!(gunzip(&body, plain.len() - 1).unwrap(), None);
    // Two members: the first size is the last one's, so the output grows to the limit.
    let mut two = gz(&plain[..10], 6);
    two.extend(gz(&plain[10..], 6));
    assert_eq!(gunzip(&two, plain.len()).unwrap().unwrap(), plain);
    assert_eq!(gunzip(&two, plain.len() - 1).unwrap(), None);
}

#[test]
fn a_forged_length_reserves_no_more_than_the_data_could_fill() {
    let mut body = gz(b"x", 6);
    let n = body.len();
    body[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(size_hint(&body, usize::MAX), n * 1032);
    assert_eq!(size_hint(&body, 100), 100);
    assert_eq!(size_hint(b"ab", 100), 0);
}

proptest! {
    /// Whatever the members and however the output grows, the text comes back whole.
    #[test]
    fn any_members_inflate_whole_through_any_growth(
        parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..3000), 1..4),
        level in 0u32..10,
        first in 0usize..64,
        grow in 1usize..5000,
    ) {
        let body: Vec<u8> = parts.iter().flat_map(|p| gz(p, level)).collect();
        let mut out = Vec::with_capacity(first);
        let mut g = Gunzip::default();
        while g.step(&body, &mut out).unwrap() == Step::Full {
            out.reserve_exact(grow);
        }
        prop_assert_eq!(out, parts.concat());
    }
}

#[test]
fn optional_header_fields_are_skipped_and_a_header_crc_checked() {
    let plain = text(20);
    let mut e = flate2::GzBuilder::new()
        .filename("metrics.txt")
        .comment("from a kubelet")
        .extra(vec![1, 2, 3, 4, 5])
        .write(Vec::new(), Compression::default());
    e.write_all(&plain).unwrap();
    let named = e.finish().unwrap();
    assert_eq!(gunzip(&named, 1 << 20).unwrap().unwrap(), plain);
    // Truncated inside the optional fields: the name has no end yet.
    assert!(matches!(
        gunzip(&named[..20], 1 << 20),
        Err(GzipError::Truncated)
    ));

    // FHCRC: the low 16 bits of the CRC-32 of the header before it.
    let plain_member = gz(&plain, 6);
    let with_hcrc = |good: bool| {
        let mut header = plain_member[..10].to_vec();
        header[3] |= 0x02;
        let mut crc = flate2::Crc::new();
        crc.update(&header);
        let stored = (crc.sum() as u16) ^ u16::from(!good);
        let mut body = header;
        body.extend_from_slice(&stored.to_le_bytes());
        body.extend_from_slice(&plain_member[10..]);
        body
    };
    assert_eq!(gunzip(&with_hcrc(true), 1 << 20).unwrap().unwrap(), plain);
    let err = gunzip(&with_hcrc(false), 1 << 20).unwrap_err();
    assert!(err.to_string().contains("header CRC"), "{err}");

    let mut not_deflate = plain_member.clone();
    not_deflate[2] = 7;
    let err = gunzip(&not_deflate, 1 << 20).unwrap_err();
    assert!(err.to_string().contains("not deflate"), "{err}");
    let mut reserved = plain_member;
    reserved[3] = 0x80;
    assert!(gunzip(&reserved, 1 << 20).is_err());
}

#[test]
fn a_kubelet_s_body_is_inflated_in_one_call_and_keeps_no_zlib_state() {
    let body = gz(&text(30), 6);
    assert_eq!(gunzip(&body, 1 << 20).unwrap().unwrap(), text(30));
    assert!(
        ONE_SHOT.with(|d| d.borrow().is_some()),
        "kept for the next body"
    );
    assert!(SPARE.with(|s| s.borrow().is_none()), "zlib never needed");
}

#[test]
fn a_kept_buffer_holds_the_next_body_and_only_its_text() {
    let first = gunzip(&gz(&text(30), 6), 1 << 20).unwrap().unwrap();
    let at = first.as_ptr();
    keep(first);
    // Shorter: written over in place, nothing of the longer text left after it.
    let second = gunzip(&gz(&text(20), 6), 1 << 20).unwrap().unwrap();
    assert_eq!(second, text(20));
    assert_eq!(second.as_ptr(), at, "the kept buffer");
    keep(second);
    // Longer: the kept buffer grows.
    assert_eq!(
        gunzip(&gz(&text(60), 6), 1 << 20).unwrap().unwrap(),
        text(60)
    );
    // A body that fails its checks leaves the kept buffer for the next.
    keep(Vec::with_capacity(64 << 10));
    let mut bad = gz(&text(30), 6);
    let n = bad.len();
    bad[n - 8] ^= 1;
    assert!(gunzip(&bad, 1 << 20).is_err());
    assert_eq!(KEPT.with(|k| k.borrow().capacity()), 64 << 10);
    // Past the bound, a buffer is freed, not kept.
    keep(Vec::with_capacity(KEEP_AT_MOST + 1));
    assert_eq!(KEPT.with(|k| k.borrow().capacity()), 64 << 10);
}

#[test]
fn the_zlib_state_is_kept_for_the_next_body_on_the_thread() {
    let mut body = gz(&text(30), 6);
    body.extend(gz(b"", 6));
    gunzip(&body, 1 << 20).unwrap().unwrap();
    assert!(
        SPARE.with(|s| s.borrow().is_some()),
        "left for the next body"
    );
    let g = Gunzip::default();
    assert!(g.inflate.is_some(), "taken by the next body");
    assert!(SPARE.with(|s| s.borrow().is_none()));
    drop(g);
    // A body cut short or corrupt leaves a state that the next body resets.
    let _ = gunzip(&body[..body.len() / 2], 1 << 20);
    assert_eq!(gunzip(&body, 1 << 20).unwrap().unwrap(), text(30));
}

#[test]
fn members_with_the_same_text_are_not_read_as_one() {
    // The last member's trailer is the first's: only its appearing twice tells them apart.
    for level in [0, 6] {
        let body = [gz(b"x\n", level), gz(b"x\n", level)].concat();
        assert_eq!(gunzip(&body, 1 << 20).unwrap().unwrap(), b"x\nx\n");
    }
}

#[test]
fn bytes_after_a_member_are_read_as_go_reads_them_even_ending_in_its_trailer() {
    let plain = text(30);
    let one = gz(&plain, 6);
    let trailer = one[one.len() - 8..].to_vec();
    // Its trailer again: too short for a second member's header.
    let again = [&one[..], &trailer].concat();
    assert!(matches!(gunzip(&again, 1 << 20), Err(GzipError::Truncated)));
    // Its own trailer broken, the right one after it: the member fails its check.
    let mut broken = one.clone();
    let n = broken.len();
    broken[n - 8] ^= 1;
    broken.extend_from_slice(&trailer);
    assert!(matches!(
        gunzip(&broken, 1 << 20),
        Err(GzipError::Corrupt(_))
    ));
    // Bytes that are no header, then the trailer or one of the same length.
    let mut other = trailer.clone();
    other[0] ^= 1;
    for last in [trailer, other] {
        let foreign = [&one[..], b"not gzip", &last].concat();
        assert!(matches!(
            gunzip(&foreign, 1 << 20),
            Err(GzipError::Corrupt(_))
        ));
    }
}

/// [`gunzip`] through zlib's streaming reader alone.
fn streaming(input: &[u8], limit: usize) -> Result<Option<Vec<u8>>, GzipError> {
    let mut inflate = Inflate::new(input, limit);
    // As `run` leaves it when the body is not one member.
    inflate.tried = true;
    inflate.out.reserve_exact(inflate.first);
    inflate_whole(inflate, input)
}

proptest! {
    /// One call or the streaming reader, a body reads the same: the same text, the same
    /// limit, the same error, whatever was cut, flipped or added.
    #[test]
    fn one_call_and_the_streaming_reader_agree_on_any_body(
        parts in prop::collection::vec(prop::collection::vec(0u8..4, 0..2000), 1..3),
        level in 0u32..10,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3),
        cut in prop::option::of(any::<prop::sample::Index>()),
        tail in prop::collection::vec(any::<u8>(), 0..3),
        limit in 0usize..5000,
    ) {
        let mut body: Vec<u8> = parts.iter().flat_map(|p| gz(p, level)).collect();
        for (at, bits) in flips {
            let at = at.index(body.len());
            body[at] ^= bits;
        }
        if let Some(cut) = cut {
            body.truncate(cut.index(body.len() + 1));
        }
        body.extend(tail);
        let (one, other) = (gunzip(&body, limit), streaming(&body, limit));
        prop_assert_eq!(format!("{one:?}"), format!("{other:?}"));
    }
}
