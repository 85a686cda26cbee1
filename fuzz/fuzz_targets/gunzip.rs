//! Gzip bodies from kubelets: `scraper::kubelet::client::gzip::gunzip`.
//!
//! Beyond "no panic": the output never passes the limit, and whatever it accepts, flate2's own
//! multi-member reader (a separate gzip header parser and checksum) reads to the same bytes;
//! but an empty body, which is an empty answer (as Go's HTTP client reads it) and which flate2
//! calls an unexpected end.

#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use scraper::kubelet::client::gzip::gunzip;

const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(out)) = gunzip(data, LIMIT) {
        assert!(out.len() <= LIMIT);
        if data.is_empty() {
            assert!(out.is_empty());
            return;
        }
        let mut reference = Vec::new();
        flate2::read::MultiGzDecoder::new(data)
            .take(LIMIT as u64 + 1)
            .read_to_end(&mut reference)
            .expect("flate2 refuses what gunzip accepted");
        assert_eq!(out, reference);
    }
});
