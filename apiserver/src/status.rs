//! The Kubernetes `Status` object: every error response is built here and nowhere else, in
//! JSON or (for a client that prefers it) protobuf, as `responsewriters.ErrorNegotiated` does.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

use crate::api::accept::{self, Format};
use crate::api::proto::{
    EMPTY_LIST_META, ENVELOPE_TAIL, field_len, put_envelope_head, put_str, put_varint,
    varint_field_len,
};
use crate::body::Body;

/// A `meta.k8s.io/v1` Status with `status: Failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// HTTP status code, also written as `code`.
    #[serde(skip)]
    pub http: u16,
    /// Human-readable message.
    pub message: String,
    /// CamelCase reason (`NotFound`, `BadRequest`, `MethodNotAllowed`, `NotAcceptable`,
    /// `Unauthorized`, `Forbidden`, `TooManyRequests`, `InternalError`, ...).
    pub reason: &'static str,
    /// `details`, when there are any.
    pub details: Option<Details>,
}

/// `Status.details`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Details {
    /// Name of the object concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// API group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind or resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What was wrong, field by field (a 422's validation errors).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
    /// Seconds the client should wait; mirrored in the `Retry-After` header.
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

/// `StatusCause`: one field's error, as apimachinery's `NewInvalid` turns a
/// `field.Error` into one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// The error's type (`FieldValueForbidden`, `FieldValueNotSupported`), written as `reason`.
    pub reason: &'static str,
    /// `field.Error.ErrorBody()`: the type's words, the bad value if any, then the detail.
    pub message: String,
    /// The field's path.
    pub field: &'static str,
}

impl Cause {
    /// `field.Forbidden(field, detail)`.
    pub fn forbidden(field: &'static str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field,
        }
    }

    /// `field.NotSupported(field, value, supported)`.
    pub fn not_supported(field: &'static str, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|v| scraper::go::quote(v)).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                scraper::go::quote(value),
                supported.join(", ")
            ),
            field,
        }
    }

    /// `StatusCause {reason = 1, message = 2, field = 3}`.
    fn protobuf_len(&self) -> usize {
        field_len(1, self.reason.len())
            + field_len(2, self.message.len())
            + field_len(3, self.field.len())
    }
}

impl Details {
    fn protobuf_len(&self) -> usize {
        let s = |v: &Option<String>| v.as_deref().map_or(0, str::len);
        field_len(1, s(&self.name))
            + field_len(2, s(&self.group))
            + field_len(3, s(&self.kind))
            + self
                .causes
                .iter()
                .map(|c| field_len(4, c.protobuf_len()))
                .sum::<usize>()
            + varint_field_len(5, u64::from(self.retry_after_seconds.unwrap_or(0)))
            + field_len(6, 0)
    }
}

#[derive(Serialize)]
struct Wire<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: Empty,
    status: &'static str,
    message: &'a str,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Details>,
    code: u16,
}

#[derive(Serialize)]
struct Empty {}

impl Status {
    /// 404 `NotFound` for `<resource>.<group> "<name>" not found` (group may be empty).
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        Status {
            http: 404,
            message: format!("{qualified} \"{name}\" not found"),
            reason: "NotFound",
            details: Some(Details {
                name: Some(name.to_owned()),
                group: Some(group.to_owned()).filter(|g| !g.is_empty()),
                kind: Some(resource.to_owned()),
                ..Details::default()
            }),
        }
    }

    /// 404 for a path nothing serves (the generic apiserver's "the server could not find the
    /// requested resource").
    pub fn no_route() -> Self {
        Status {
            http: 404,
            message: "the server could not find the requested resource".to_owned(),
            reason: "NotFound",
            details: Some(Details::default()),
        }
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Status {
            http: 400,
            message: message.into(),
            reason: "BadRequest",
            details: None,
        }
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Status {
            http: 405,
            message: message.into(),
            reason: "MethodNotAllowed",
            details: None,
        }
    }

    /// 405 for a method no route serves (go-restful's 405 through the apiserver's
    /// `NewGenericServerResponse`): "the server does not allow this method on the requested
    /// resource", empty details.
    pub fn method_not_allowed_generic() -> Self {
        Status {
            http: 405,
            message: "the server does not allow this method on the requested resource".to_owned(),
            reason: "MethodNotAllowed",
            details: Some(Details::default()),
        }
    }

    /// 405 `MethodNotAllowed` of apimachinery's `NewMethodNotSupported`, e.g. for a watch:
    /// `watch is not supported on resources of kind "pods.metrics.k8s.io"`.
    pub fn method_not_supported(resource: &str, group: &str, action: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        Status {
            http: 405,
            message: format!("{action} is not supported on resources of kind \"{qualified}\""),
            reason: "MethodNotAllowed",
            details: Some(Details {
                group: Some(group.to_owned()).filter(|g| !g.is_empty()),
                kind: Some(resource.to_owned()),
                ..Details::default()
            }),
        }
    }

    /// 422 `Invalid` of apimachinery's `NewInvalid` for an unnamed object of `kind.group`
    /// (`ListOptions.meta.k8s.io "" is invalid: <field>: <error>`, several errors in
    /// brackets), one cause per error.
    pub fn invalid(group: &str, kind: &str, causes: Vec<Cause>) -> Self {
        let errors: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let errors = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Status {
            http: 422,
            message: format!("{kind}.{group} \"\" is invalid: {errors}"),
            reason: "Invalid",
            details: Some(Details {
                group: Some(group.to_owned()),
                kind: Some(kind.to_owned()),
                causes,
                ..Details::default()
            }),
        }
    }

    /// 406 `NotAcceptable`.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Status {
            http: 406,
            message: message.into(),
            reason: "NotAcceptable",
            details: None,
        }
    }

    /// 401 `Unauthorized`, in the generic apiserver's wording.
    pub fn unauthorized() -> Self {
        Status {
            http: 401,
            message: "Unauthorized".to_owned(),
            reason: "Unauthorized",
            details: None,
        }
    }

    /// 403 `Forbidden` with an already-worded message and the group/kind details.
    pub fn forbidden(message: impl Into<String>, details: Option<Details>) -> Self {
        Status {
            http: 403,
            message: message.into(),
            reason: "Forbidden",
            details,
        }
    }

    /// 429 `TooManyRequests`; the response also carries `Retry-After: <seconds>`.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        Status {
            http: 429,
            message: message.into(),
            reason: "TooManyRequests",
            details: Some(Details {
                retry_after_seconds: Some(retry_after_seconds),
                ..Details::default()
            }),
        }
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Status {
            http: 500,
            message: message.into(),
            reason: "InternalError",
            details: None,
        }
    }

    /// 503 `ServiceUnavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Status {
            http: 503,
            message: message.into(),
            reason: "ServiceUnavailable",
            details: None,
        }
    }

    /// 504 `Timeout` of k8s.io/apiserver's timeout filter, for a request that had no answer
    /// within `--request-timeout` (`NewTimeoutError("request did not complete within the
    /// allotted timeout", 0)`: the message gets the `Timeout: ` prefix, the details are empty).
    pub fn timeout() -> Self {
        Status {
            http: 504,
            message: "Timeout: request did not complete within the allotted timeout".to_owned(),
            reason: "Timeout",
            details: Some(Details::default()),
        }
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        let wire = Wire {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: self.details.as_ref(),
            code: self.http,
        };
        serde_json::to_vec(&wire).unwrap_or_else(|_| b"{}".to_vec())
    }

    /// The protobuf body: `metav1.Status` (`metadata = 1 ListMeta, status = 2, message = 3,
    /// reason = 4, details = 5, code = 6`; `StatusDetails {name = 1, group = 2, kind = 3,
    /// retryAfterSeconds = 5, uid = 6}`) in the `v1` `Status` envelope, every non-pointer
    /// field written as gogo does.
    pub fn to_protobuf(&self) -> Vec<u8> {
        let details_len = self.details.as_ref().map(Details::protobuf_len);
        let raw_len = EMPTY_LIST_META.len()
            + field_len(2, "Failure".len())
            + field_len(3, self.message.len())
            + field_len(4, self.reason.len())
            + details_len.map_or(0, |l| field_len(5, l))
            + varint_field_len(6, u64::from(self.http));
        let mut out = Vec::with_capacity(raw_len + 32);
        put_envelope_head(&mut out, "v1", "Status", raw_len);
        out.extend_from_slice(EMPTY_LIST_META);
        put_str(&mut out, 2, "Failure");
        put_str(&mut out, 3, &self.message);
        put_str(&mut out, 4, self.reason);
        if let (Some(d), Some(len)) = (&self.details, details_len) {
            crate::api::proto::put_header(&mut out, 5, len);
            put_str(&mut out, 1, d.name.as_deref().unwrap_or(""));
            put_str(&mut out, 2, d.group.as_deref().unwrap_or(""));
            put_str(&mut out, 3, d.kind.as_deref().unwrap_or(""));
            for c in &d.causes {
                crate::api::proto::put_header(&mut out, 4, c.protobuf_len());
                put_str(&mut out, 1, c.reason);
                put_str(&mut out, 2, &c.message);
                put_str(&mut out, 3, c.field);
            }
            put_varint(&mut out, 5, u64::from(d.retry_after_seconds.unwrap_or(0)));
            put_str(&mut out, 6, "");
        }
        put_varint(&mut out, 6, u64::from(self.http));
        out.extend_from_slice(ENVELOPE_TAIL);
        out
    }

    /// The HTTP response: JSON body, `Content-Type: application/json`, and `Retry-After`
    /// when the details carry one.
    pub fn into_response(self) -> Response<Body> {
        self.into_format(Format::Json)
    }

    /// The HTTP response in the serializer the request's `Accept` header prefers among JSON,
    /// YAML and protobuf (JSON when it accepts none).
    pub fn into_response_for(self, accept: Option<&str>) -> Response<Body> {
        let format = accept::negotiate_status(accept);
        self.into_format(format)
    }

    /// [`into_response_for`](Self::into_response_for) the request's `Accept` header.
    pub fn into_negotiated(self, request_headers: &http::HeaderMap) -> Response<Body> {
        let accept = request_headers
            .get(header::ACCEPT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()));
        self.into_response_for(accept.as_deref())
    }

    fn into_format(self, format: Format) -> Response<Body> {
        let code = StatusCode::from_u16(self.http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.details.as_ref().and_then(|d| d.retry_after_seconds);
        let body = match format {
            Format::Json => self.to_json(),
            Format::Yaml => crate::api::yaml::document_from_json(&self.to_json()),
            Format::Protobuf => self.to_protobuf(),
        };
        let mut response = Response::new(crate::body::full(Bytes::from(body)));
        *response.status_mut() = code;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        if let Some(seconds) = retry {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        // For the audit log's `responseStatus`.
        response.extensions_mut().insert(self);
        response
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_metrics_server_wording() {
        let s = Status::not_found("nodemetrics", "metrics.k8s.io", "n1");
        let v: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(v["message"], "nodemetrics.metrics.k8s.io \"n1\" not found");
        assert_eq!(v["reason"], "NotFound");
        assert_eq!(v["code"], 404);
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["metadata"], serde_json::json!({}));
    }

    #[test]
    fn too_many_requests_sets_retry_after_header_and_details() {
        let r = Status::too_many_requests("storage is (re)initializing", 2).into_response();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
    }
}
