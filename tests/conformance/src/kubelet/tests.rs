//! How the simulated kubelet answers a metrics request, against what a real one does.
#![allow(clippy::unwrap_used)]

use std::io::Read;

use http_body_util::BodyExt;

use super::*;

fn asking(accept_encoding: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(v) = accept_encoding {
        headers.insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    headers
}

/// The answer's frames, as the client would read them.
async fn frames(response: Response<Body>) -> Vec<Bytes> {
    let mut body = response.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            out.push(data);
        }
    }
    out
}

/// At least `bytes` of metric lines whose pods and values vary, as a kubelet's do.
fn metric_text(bytes: usize) -> Bytes {
    let mut text = String::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0.. {
        if text.len() >= bytes {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!(
            "container_memory_working_set_bytes{{container=\"c{i}\",namespace=\"n\",pod=\"p{i}\"}} {} 1700000{:06}\n",
            x % 1_000_000_000,
            x % 1_000_000
        ));
    }
    text.into()
}

#[test]
fn gzip_is_offered_by_name_or_star_with_a_weight_above_zero() {
    for (header, gzip) in [
        (None, false),
        (Some("gzip"), true),
        (Some("GZIP"), true),
        (Some("deflate, gzip;q=0.5"), true),
        (Some("*"), true),
        (Some("gzip;q=0"), false),
        (Some("gzip; q=0.0, identity"), false),
        (Some("br, identity"), false),
    ] {
        assert_eq!(accepts_gzip(&asking(header)), gzip, "{header:?}");
    }
}

#[tokio::test]
async fn resource_metrics_are_gzipped_when_asked_and_chunked_as_go_sends_them() {
    let text = metric_text(40_000);
    let (response, len) = metrics_answer(&asking(Some("gzip")), false, text.clone());
    assert_eq!(
        response
            .headers()
            .get(http::header::CONTENT_ENCODING)
            .unwrap(),
        "gzip"
    );
    // No exact size: hyper sends it chunked, as Go's server sends a body past its buffer.
    assert_eq!(http_body::Body::size_hint(response.body()).exact(), None);
    let frames = frames(response).await;
    assert!(frames.iter().all(|f| f.len() <= GO_CHUNKING_BYTES));
    let sent: Vec<u8> = frames.concat();
    assert_eq!(sent.len(), len);
    assert!(
        len > GO_CHUNKING_BYTES && len * 2 < text.len(),
        "{len} bytes for {}",
        text.len()
    );
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&sent[..])
        .read_to_end(&mut plain)
        .unwrap();
    assert_eq!(plain, text);
}

#[tokio::test]
async fn unasked_or_summary_answers_are_plain_and_short_ones_have_a_length() {
    let text = metric_text(40_000);
    for (headers, summary) in [(asking(None), false), (asking(Some("gzip")), true)] {
        let (response, len) = metrics_answer(&headers, summary, text.clone());
        assert!(
            response
                .headers()
                .get(http::header::CONTENT_ENCODING)
                .is_none()
        );
        assert_eq!(len, text.len());
        assert_eq!(frames(response).await.concat(), text);
    }
    let short = metric_text(1000);
    let (response, _) = metrics_answer(&asking(None), false, short.clone());
    // An exact size: hyper sends a Content-Length, as Go's server does for a short body.
    assert_eq!(
        http_body::Body::size_hint(response.body()).exact(),
        Some(short.len() as u64)
    );
}
