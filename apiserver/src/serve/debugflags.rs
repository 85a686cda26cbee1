//! `/debug/flags` and `/debug/flags/v`, which k8s.io/apiserver installs when `--profiling` is
//! on (metrics-server's default): `PUT` a klog verbosity to `/debug/flags/v` and the log
//! levels change at once, without a restart (`routes.DebugFlags` with
//! `StringFlagPutHandler(GlogSetter)`). Both are unlisted in `/`, as upstream; authorization
//! sees a non-resource `put` on `/debug/flags/v`.

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Limited};

use crate::body::Body;

/// The verbosity flag's path.
pub const V: &str = "/debug/flags/v";

/// The most a `PUT` body is read: an int32 in decimal is at most 11 bytes.
pub const BODY_LIMIT: usize = 1024;

/// What changes the verbosity: the value as sent, upstream's answer text or error text.
pub type Setter = fn(&str) -> Result<String, String>;

/// Whether `path` is one of these handlers' (`/debug/flags`, anything under it).
pub fn serves(path: &str) -> bool {
    path == "/debug/flags" || path.starts_with("/debug/flags/")
}

/// The answer to `method` on `path` (one [`serves`]), reading `body` only for a `PUT` to
/// [`V`], and at most [`BODY_LIMIT`] bytes of it.
pub async fn answer<B>(method: &Method, path: &str, body: B, set: Setter) -> Response<Body>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if path != V {
        return index();
    }
    if method != Method::PUT {
        return text(StatusCode::NOT_ACCEPTABLE, "unsupported http method");
    }
    let value = match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("error reading request body: more than {BODY_LIMIT} bytes"),
            );
        }
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("error reading request body: {e}"),
            );
        }
    };
    let value = String::from_utf8_lossy(&value);
    match set(&value) {
        Ok(done) => text(StatusCode::OK, &done),
        Err(e) => text(StatusCode::BAD_REQUEST, &e),
    }
}

/// `DebugFlags.Index`: the page listing the one flag, as Go's template renders it.
fn index() -> Response<Body> {
    const PAGE: &str = "<html>\n<head>\n<title>/debug/flags/</title>\n</head>\n<body>\n\
                        /debug/flags/<br>\n<br>\nflags:<br>\n<table>\n\n<tr>v<br>\n\n</table>\n\
                        <br>\nfull flags configurable<br>\n</body>\n</html>\n";
    let mut response = Response::new(crate::body::full(Bytes::from_static(PAGE.as_bytes())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// `writePlainText`: the text and a newline, `text/plain`, no sniffing.
fn text(status: StatusCode, message: &str) -> Response<Body> {
    crate::body::text(status, "text/plain", format!("{message}\n"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body_util::Full;

    fn set(value: &str) -> Result<String, String> {
        crate::cli::logging::set_verbosity(value)
    }

    async fn call(method: Method, path: &str, body: &str) -> (u16, String, String) {
        let r = answer(&method, path, Full::new(Bytes::from(body.to_owned())), set).await;
        let status = r.status().as_u16();
        let content_type = r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn a_put_sets_the_verbosity_as_glog_setter_does() {
        assert_eq!(
            call(Method::PUT, V, "4").await,
            (
                200,
                "text/plain".to_owned(),
                "successfully set klog.logging.verbosity to 4\n".to_owned()
            )
        );
        assert_eq!(crate::cli::logging::verbosity(), 4);
        // Not an int32 as Go parses it: 400, and the verbosity stays.
        for (bad, why) in [
            ("4\n", "strconv.ParseInt: parsing \"4\\n\": invalid syntax"),
            ("high", "strconv.ParseInt: parsing \"high\": invalid syntax"),
            (
                "2147483648",
                "strconv.ParseInt: parsing \"2147483648\": value out of range",
            ),
        ] {
            let (status, _, body) = call(Method::PUT, V, bad).await;
            assert_eq!(status, 400, "{bad:?}");
            assert_eq!(
                body,
                format!("failed set klog.logging.verbosity {bad}: {why}\n")
            );
        }
        assert_eq!(crate::cli::logging::verbosity(), 4);
        assert_eq!(
            call(Method::PUT, V, "0").await.2,
            "successfully set klog.logging.verbosity to 0\n"
        );
        assert_eq!(crate::cli::logging::verbosity(), 0);
    }

    #[tokio::test]
    async fn other_methods_get_406_and_the_index_lists_v() {
        assert_eq!(
            call(Method::GET, V, "").await,
            (
                406,
                "text/plain".to_owned(),
                "unsupported http method\n".to_owned()
            )
        );
        for path in ["/debug/flags", "/debug/flags/", "/debug/flags/other"] {
            let (status, content_type, body) = call(Method::GET, path, "").await;
            assert_eq!(
                (status, content_type.as_str()),
                (200, "text/html; charset=utf-8")
            );
            assert!(body.contains("<tr>v<br>"), "{body}");
        }
        assert!(serves("/debug/flags") && serves("/debug/flags/v"));
        assert!(!serves("/debug/flagsx") && !serves("/debug/pprof/"));
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_not_read_whole() {
        fn never(value: &str) -> Result<String, String> {
            panic!("the setter was called with {} bytes", value.len())
        }
        let body = Full::new(Bytes::from("1".repeat(BODY_LIMIT + 1)));
        let r = answer(&Method::PUT, V, body, never).await;
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
