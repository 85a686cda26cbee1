//! Routes one request: authentication, health and version, discovery, reviews, APIServices,
//! the core API, the APIServices' OpenAPI v3 documents (`kubectl explain`), and everything
//! else of a registered group version to the aggregator.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::discovery::{self, Group};
use super::serve::{Handler, Peer};
use super::{Body, GIT_VERSION, Shared, full, json_response, status_response};
use crate::aggregator::proxy::upstream_body;

const MAX_BODY_BYTES: usize = 1 << 20;

/// The control plane's request handler.
pub(crate) fn handler(shared: Arc<Shared>) -> Handler {
    Arc::new(move |req, peer| {
        let shared = shared.clone();
        Box::pin(async move { route(&shared, req, peer).await })
    })
}

fn not_found() -> Response<Body> {
    status_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn ok_text(text: &'static str) -> Response<Body> {
    let mut resp = Response::new(full(text));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn v2_response(doc: &Value) -> Response<Body> {
    let mut resp = json_response(StatusCode::OK, doc);
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(discovery::V2_CONTENT_TYPE),
    );
    h.insert("vary", HeaderValue::from_static("Accept"));
    resp
}

fn all_groups(shared: &Shared) -> Vec<Group> {
    let mut groups = discovery::builtin_groups();
    groups.extend(shared.aggregator.groups());
    discovery::sort_groups(&mut groups);
    groups
}

async fn route(shared: &Shared, req: Request<Incoming>, peer: Peer) -> Response<Body> {
    let authorization = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = match shared.authn.authenticate(&peer.certs, authorization) {
        Ok(user) => user,
        Err(_) => return status_response(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"),
    };
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/healthz" | "/livez" | "/readyz" => return ok_text("ok"),
        "/version" => {
            return json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": "37", "gitVersion": GIT_VERSION,
                        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                        "buildDate": "2026-08-27T00:00:00Z", "goVersion": "go1.26.4",
                        "compiler": "gc", "platform": "linux/amd64"}),
            );
        }
        _ => {}
    }
    if user.is_anonymous() {
        return status_response(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("forbidden: User \"system:anonymous\" cannot get path \"{path}\""),
        );
    }
    let accept = accept_header(&req).to_owned();
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    let get = req.method() == Method::GET;
    match segments.as_slice() {
        ["api"] if get => {
            return if discovery::accepts_v2(&accept) {
                v2_response(&discovery::api_v2())
            } else {
                json_response(StatusCode::OK, &discovery::api_versions(&shared.address))
            };
        }
        ["api", "v1"] if get => {
            return json_response(
                StatusCode::OK,
                &discovery::resource_list("v1", discovery::CORE),
            );
        }
        ["api", "v1", ..] => {
            let (parts, body) = req.into_parts();
            let Some(body) = read_body(body).await else {
                return status_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "RequestEntityTooLarge",
                    "request body too large",
                );
            };
            return shared
                .core
                .handle(Request::from_parts(parts, body))
                .await
                .unwrap_or_else(not_found);
        }
        ["apis"] if get => {
            let groups = all_groups(shared);
            return if discovery::accepts_v2(&accept) {
                v2_response(&discovery::apis_v2(&groups))
            } else {
                json_response(StatusCode::OK, &discovery::api_group_list(&groups))
            };
        }
        ["apis", group] if get => {
            return match all_groups(shared).iter().find(|g| g.name == *group) {
                Some(g) => json_response(StatusCode::OK, &discovery::api_group(g)),
                None => not_found(),
            };
        }
        ["openapi", "v3"] if get => {
            return json_response(StatusCode::OK, &shared.aggregator.openapi_v3_index().await);
        }
        ["openapi", "v3", "apis", group, version] if get => {
            let (group, version) = ((*group).to_owned(), (*version).to_owned());
            let (parts, body) = req.into_parts();
            let req = Request::from_parts(parts, upstream_body(body));
            return shared
                .aggregator
                .openapi_v3(&group, &version, req)
                .await
                .unwrap_or_else(not_found);
        }
        _ => {}
    }
    if let Some((group, version, resources)) = builtin(&segments) {
        return match (segments.len(), req.method()) {
            (3, &Method::GET) => json_response(
                StatusCode::OK,
                &discovery::resource_list(&format!("{group}/{version}"), resources),
            ),
            _ => builtin_resource(shared, &user, req, &segments).await,
        };
    }
    let (parts, body) = req.into_parts();
    let req = Request::from_parts(parts, upstream_body(body));
    match shared.aggregator.proxy(req, &user).await {
        Some(resp) => resp,
        None => not_found(),
    }
}

fn builtin(
    segments: &[&str],
) -> Option<(&'static str, &'static str, &'static [discovery::Resource])> {
    let [_, group, version, ..] = segments else {
        return None;
    };
    if segments.first() != Some(&"apis") {
        return None;
    }
    discovery::BUILTIN
        .iter()
        .find(|(g, v, _, _)| g == group && v == version)
        .map(|(g, v, _, r)| (*g, *v, *r))
}

/// The request's `Accept` header, empty when absent or not text.
fn accept_header(req: &Request<Incoming>) -> &str {
    req.headers()
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn read_body(body: Incoming) -> Option<Bytes> {
    Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .ok()
        .map(|c| c.to_bytes())
}

async fn builtin_resource(
    shared: &Shared,
    user: &super::User,
    req: Request<Incoming>,
    segments: &[&str],
) -> Response<Body> {
    let method = req.method().clone();
    let as_table = accept_header(&req).contains("as=Table");
    match (&method, segments) {
        (&Method::POST, ["apis", "authentication.k8s.io", "v1", "tokenreviews"]) => {
            let body = read_json(req.into_body()).await;
            match body.and_then(|b| shared.reviews.token_review(user, &shared.authn, &b)) {
                Some(doc) => json_response(StatusCode::CREATED, &doc),
                None => bad_request(),
            }
        }
        (&Method::POST, ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]) => {
            let body = read_json(req.into_body()).await;
            match body.and_then(|b| shared.reviews.access_review(user, &b)) {
                Some(doc) => json_response(StatusCode::CREATED, &doc),
                None => bad_request(),
            }
        }
        (&Method::GET, ["apis", "apiregistration.k8s.io", "v1", "apiservices"]) => {
            let items = shared.aggregator.objects();
            if as_table {
                return json_response(StatusCode::OK, &apiservice_table(&items));
            }
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIServiceList", "apiVersion": "apiregistration.k8s.io/v1",
                        "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        (&Method::GET, ["apis", "apiregistration.k8s.io", "v1", "apiservices", name]) => {
            let items = shared.aggregator.objects();
            match items
                .iter()
                .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(*name))
            {
                Some(o) => {
                    if as_table {
                        return json_response(
                            StatusCode::OK,
                            &apiservice_table(std::slice::from_ref(o)),
                        );
                    }
                    json_response(StatusCode::OK, o)
                }
                None => status_response(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("apiservices.apiregistration.k8s.io \"{name}\" not found"),
                ),
            }
        }
        _ => status_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!("the server does not allow this method on the requested resource ({method})"),
        ),
    }
}

fn bad_request() -> Response<Body> {
    status_response(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "the request body is not a valid review",
    )
}

async fn read_json(body: Incoming) -> Option<Value> {
    serde_json::from_slice(&read_body(body).await?).ok()
}

/// `kubectl get apiservice` columns: NAME SERVICE AVAILABLE AGE.
fn apiservice_table(items: &[Value]) -> Value {
    let col = |name: &str, format: &str| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0});
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let s = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let available = if s("/status/conditions/0/status") == "True" {
                "True".to_owned()
            } else {
                format!(
                    "{} ({})",
                    s("/status/conditions/0/status"),
                    s("/status/conditions/0/reason")
                )
            };
            let service = format!(
                "{}/{}",
                s("/spec/service/namespace"),
                s("/spec/service/name")
            );
            json!({"cells": [s("/metadata/name"), service, available, "<unknown>"],
                   "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                              "metadata": o.get("metadata")}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"},
           "columnDefinitions": [col("Name", "name"), col("Service", ""), col("Available", ""), col("Age", "")],
           "rows": rows})
}
