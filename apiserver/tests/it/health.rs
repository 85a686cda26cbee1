//! `/livez`, `/readyz`, `/healthz` over the wire, and the start-up timeout.

use std::time::Duration;

use http::StatusCode;

use crate::support::{Client, eventually, start};

const LIVEZ_VERBOSE: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n[+]metric-collection-timely ok\n\
[+]metadata-informer-sync ok\nlivez check passed\n";

const READYZ_VERBOSE: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n[+]metric-storage-ready ok\n\
[+]metric-informer-sync ok\n[+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check passed\n";

const READYZ_COLD: &str = "[+]ping ok\n[+]log ok\n[+]poststarthook/max-in-flight-filter ok\n\
[+]poststarthook/storage-object-count-tracker-hook ok\n\
[-]metric-storage-ready failed: reason withheld\n[+]metric-informer-sync ok\n\
[+]metadata-informer-sync ok\n[+]shutdown ok\nreadyz check failed\n";

#[tokio::test]
async fn livez_plain_and_verbose() {
    let server = start(|_| {}).await;
    let c = Client::insecure();
    let plain = c.get(server.addr, "/livez").await;
    assert_eq!((plain.status, plain.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(
        plain.headers[http::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let verbose = c.get(server.addr, "/livez?verbose").await;
    assert_eq!(
        (verbose.status, verbose.body.as_str()),
        (StatusCode::OK, LIVEZ_VERBOSE)
    );
    let healthz = c.get(server.addr, "/healthz").await;
    assert_eq!(
        (healthz.status, healthz.body.as_str()),
        (StatusCode::OK, "ok")
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn readyz_fails_without_data_then_passes_after_the_startup_timeout() {
    let server = start(|s| s.readiness_timeout = Some(Duration::from_millis(1500))).await;
    let c = Client::insecure();
    let cold = c.get(server.addr, "/readyz?verbose").await;
    assert_eq!(
        (cold.status, cold.body.as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, READYZ_COLD)
    );
    let single = c.get(server.addr, "/readyz/metric-storage-ready").await;
    assert_eq!(single.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(single.body, "internal server error: no metrics to serve\n");
    // Excluding the failing check passes.
    let excluded = c
        .get(server.addr, "/readyz?exclude=metric-storage-ready")
        .await;
    assert_eq!(
        (excluded.status, excluded.body.as_str()),
        (StatusCode::OK, "ok")
    );

    let passed_at = eventually(Duration::from_secs(10), || async {
        let r = Client::insecure().get(server.addr, "/readyz").await;
        (r.status == StatusCode::OK).then(|| server.started.elapsed())
    })
    .await
    .expect("/readyz passes after the start-up timeout");
    assert!(passed_at >= Duration::from_millis(1500), "{passed_at:?}");
    let verbose = c.get(server.addr, "/readyz?verbose").await;
    assert_eq!(
        (verbose.status, verbose.body.as_str()),
        (StatusCode::OK, READYZ_VERBOSE)
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn readyz_never_passes_without_data_when_the_timeout_is_off() {
    let off = start(|s| s.readiness_timeout = None).await;
    // A server started after it with a 1 ms timeout: once that one passes, the timeout
    // would have passed for `off` too (the clock is covered in `health`'s unit tests).
    let on = start(|s| s.readiness_timeout = Some(Duration::from_millis(1))).await;
    eventually(Duration::from_secs(10), || async {
        let r = Client::insecure().get(on.addr, "/readyz").await;
        (r.status == StatusCode::OK).then_some(())
    })
    .await
    .expect("the server with a timeout passes");
    let r = Client::insecure().get(off.addr, "/readyz").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    off.shutdown.cancel();
    on.shutdown.cancel();
}
