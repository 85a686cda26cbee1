//! The authorizer and the 403 wording.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use super::authn::{alice, proxied_alice};
use super::fake::FakeApi;
use super::*;
use crate::auth::{
    Attributes, Authorizer, AuthzConfig, AuthzError, Budget, Decision, ReviewLimits, UserInfo,
    attributes, forbidden,
};

fn get(path: &str, query: Option<&str>) -> Attributes {
    attributes(&Method::GET, path, query)
}

fn authorizer(api: &FakeApi, authorized: Duration, unauthorized: Duration) -> Authorizer {
    Authorizer::new(
        AuthzConfig {
            authorized_ttl: authorized,
            unauthorized_ttl: unauthorized,
            ..AuthzConfig::default()
        },
        Some(api.client.clone()),
    )
    .expect("authorizer")
}

fn allow_if(user: &'static str) -> impl Fn(&Value) -> (u16, Value) + Send + Sync {
    move |review| {
        (
            200,
            json!({"allowed": review["spec"]["user"] == user, "reason": ""}),
        )
    }
}

#[tokio::test]
async fn front_proxy_identity_reaches_subject_access_review_exactly() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let mut h = proxied_alice();
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");

    let api = FakeApi::start().await;
    api.answer_access(allow_if("alice"));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let attrs = get(
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
        Some("labelSelector=app%3Dweb"),
    );
    assert_eq!(authz.authorize(&user, &attrs).await, Decision::Allow);

    let sent = api.state.access_reviews.lock()[0].clone();
    assert_eq!(
        sent,
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": {
                "user": "alice",
                "uid": "uid-42",
                "groups": ["dev", "system:authenticated"],
                "extra": {"foo/bar": ["v1", "v2"], "scopes": ["s"]},
                "resourceAttributes": {
                    "namespace": "default", "verb": "list", "group": "metrics.k8s.io",
                    "version": "v1beta1", "resource": "pods", "subresource": "", "name": "",
                    "labelSelector": {"requirements": [
                        {"key": "app", "operator": "In", "values": ["web"]}
                    ]}
                }
            }
        })
    );
}

#[tokio::test]
async fn non_resource_paths_are_reviewed_as_paths() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("nobody"));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let decision = authz.authorize(&alice(), &get("/metrics", None)).await;
    assert_eq!(decision, Decision::Deny(String::new()));
    let sent = api.state.access_reviews.lock()[0].clone();
    assert_eq!(
        sent["spec"]["nonResourceAttributes"],
        json!({"path": "/metrics", "verb": "get"})
    );
    assert_eq!(sent["spec"].get("resourceAttributes"), None);
}

#[tokio::test]
async fn answers_are_cached_for_their_ttl() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("alice"));
    let ttl = Duration::from_secs(10);
    let authz = authorizer(&api, ttl, ttl);
    let attrs = get("/apis/metrics.k8s.io/v1beta1/nodes", None);
    let bob = UserInfo {
        name: "bob".into(),
        ..UserInfo::default()
    };

    assert_eq!(authz.authorize(&alice(), &attrs).await, Decision::Allow);
    assert_eq!(authz.authorize(&alice(), &attrs).await, Decision::Allow);
    assert_eq!(
        api.access_review_count(),
        1,
        "an identical request within the TTL"
    );
    assert!(matches!(
        authz.authorize(&bob, &attrs).await,
        Decision::Deny(_)
    ));
    assert!(matches!(
        authz.authorize(&bob, &attrs).await,
        Decision::Deny(_)
    ));
    assert_eq!(api.access_review_count(), 2, "denials are cached too");
    let other = get("/apis/metrics.k8s.io/v1beta1/nodes/n1", None);
    authz.authorize(&alice(), &other).await;
    assert_eq!(
        api.access_review_count(),
        3,
        "other attributes are another review"
    );

    jump(ttl + Duration::from_millis(1)).await;
    assert_eq!(authz.authorize(&alice(), &attrs).await, Decision::Allow);
    assert_eq!(
        api.access_review_count(),
        4,
        "after the TTL it is reviewed again"
    );
}

#[tokio::test]
async fn a_failed_review_is_an_internal_error_never_a_deny_and_is_not_cached() {
    let api = FakeApi::start().await;
    api.answer_access(|_| (500, json!({})));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let attrs = get("/apis/metrics.k8s.io/v1beta1/nodes", None);
    let decision = authz.authorize(&alice(), &attrs).await;
    assert!(matches!(decision, Decision::Error(_)), "{decision:?}");
    assert_eq!(api.access_review_count(), 2, "a 500 is tried once more");
    api.answer_access(allow_if("alice"));
    assert_eq!(authz.authorize(&alice(), &attrs).await, Decision::Allow);
    assert_eq!(api.access_review_count(), 3);
}

#[tokio::test]
async fn a_review_dropped_in_transport_is_retried_once_then_an_internal_error() {
    let api = FakeApi::start().await;
    api.answer_access(|_| (0, json!({})));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let attrs = get("/apis/metrics.k8s.io/v1beta1/nodes", None);
    let Decision::Error(error) = authz.authorize(&alice(), &attrs).await else {
        panic!("a review that cannot be made is not an answer");
    };
    assert!(error.contains("SubjectAccessReview failed"), "{error}");
    assert_eq!(api.access_review_count(), 2);

    // Dropped once, then answered: the request is allowed.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let allow = allow_if("alice");
    api.answer_access(
        move |review| match seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => (0, json!({})),
            _ => allow(review),
        },
    );
    let attrs = get("/apis/metrics.k8s.io/v1beta1/pods", None);
    assert_eq!(authz.authorize(&alice(), &attrs).await, Decision::Allow);
    assert_eq!(api.access_review_count(), 4);
}

#[tokio::test]
async fn reviews_past_the_budget_are_throttled_and_cached_answers_are_free() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("alice"));
    let authz = Authorizer::new(
        AuthzConfig {
            review_limits: ReviewLimits {
                qps: 1,
                per_source_qps: 1,
            },
            ..AuthzConfig::default()
        },
        Some(api.client.clone()),
    )
    .expect("authorizer");
    let source = Budget::Source(std::net::IpAddr::from([192, 0, 2, 7]));
    let namespace = |ns: &str| {
        get(
            &format!("/apis/metrics.k8s.io/v1/namespaces/{ns}/pods"),
            None,
        )
    };
    for ns in ["a", "b"] {
        assert_eq!(
            authz.authorize_from(&alice(), &namespace(ns), source).await,
            Decision::Allow
        );
    }
    let decision = authz
        .authorize_from(&alice(), &namespace("c"), source)
        .await;
    assert!(matches!(decision, Decision::Throttled(_)), "{decision:?}");
    assert_eq!(
        authz
            .authorize_from(&alice(), &namespace("a"), source)
            .await,
        Decision::Allow,
        "cached"
    );
    assert_eq!(api.access_review_count(), 2);
}

#[tokio::test]
async fn concurrent_identical_questions_make_one_review() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("alice"));
    api.hold_reviews();
    let authz = std::sync::Arc::new(authorizer(
        &api,
        Duration::from_secs(10),
        Duration::from_secs(10),
    ));
    let attrs = get(
        "/apis/metrics.k8s.io/v1/namespaces/a/pods",
        Some("labelSelector=app%3Dweb"),
    );
    let key = serde_json::to_string(&crate::auth::review_spec(&alice(), &attrs)).expect("key");
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..30 {
        let (authz, attrs) = (authz.clone(), attrs.clone());
        requests.spawn(async move { authz.authorize(&alice(), &attrs).await });
    }
    while authz.waiting(&key) < 30 {
        tokio::task::yield_now().await;
    }
    api.release(1);
    while let Some(decision) = requests.join_next().await {
        assert_eq!(decision.expect("task"), Decision::Allow);
    }
    assert_eq!(api.access_review_count(), 1);
}

#[tokio::test]
async fn system_masters_skip_subject_access_review() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("nobody"));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let aggregator = UserInfo {
        name: "system:kube-aggregator".into(),
        groups: vec!["system:masters".into()],
        ..UserInfo::default()
    };
    for attrs in [
        get("/apis/metrics.k8s.io/v1beta1", None),
        get("/apis/metrics.k8s.io/v1/namespaces/a/pods", None),
    ] {
        assert_eq!(authz.authorize(&aggregator, &attrs).await, Decision::Allow);
    }
    assert_eq!(api.access_review_count(), 0);
}

#[tokio::test]
async fn health_paths_are_always_allowed_exactly() {
    let api = FakeApi::start().await;
    api.answer_access(allow_if("nobody"));
    let authz = authorizer(&api, Duration::from_secs(10), Duration::from_secs(10));
    let anonymous = UserInfo::anonymous();
    for path in ["/healthz", "/readyz", "/livez"] {
        assert_eq!(
            authz.authorize(&anonymous, &get(path, None)).await,
            Decision::Allow
        );
    }
    assert_eq!(api.access_review_count(), 0);
    for path in ["/readyz/metric-storage-ready", "/healthzz", "/metrics"] {
        assert!(
            matches!(
                authz.authorize(&anonymous, &get(path, None)).await,
                Decision::Deny(_)
            ),
            "{path}"
        );
    }
    assert_eq!(api.access_review_count(), 3);
}

#[tokio::test]
async fn a_trailing_star_makes_a_prefix_and_a_star_elsewhere_is_refused() {
    let config = AuthzConfig {
        always_allow_paths: vec!["/debug/*".into(), "/metrics".into()],
        ..AuthzConfig::default()
    };
    let authz = Authorizer::new(config, None).expect("authorizer");
    let anonymous = UserInfo::anonymous();
    for (path, allowed) in [
        ("/debug/pprof/heap", true),
        ("/metrics", true),
        ("/healthz", false),
        ("/debugger", false),
    ] {
        let decision = authz.authorize(&anonymous, &get(path, None)).await;
        assert_eq!(decision == Decision::Allow, allowed, "{path}");
    }
    let bad = AuthzConfig {
        always_allow_paths: vec!["/a*/b".into()],
        ..AuthzConfig::default()
    };
    assert!(matches!(
        Authorizer::new(bad, None),
        Err(AuthzError::Path(_))
    ));
}

#[test]
fn forbidden_messages_use_the_upstream_wording() {
    let user = alice();
    let namespaced = forbidden(
        &user,
        &get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", None),
        "",
    );
    let body: Value = serde_json::from_slice(&namespaced.to_json()).expect("json");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods.metrics.k8s.io is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\"",
               "reason": "Forbidden", "details": {"group": "metrics.k8s.io", "kind": "pods"},
               "code": 403})
    );

    let cluster = forbidden(&user, &get("/apis/metrics.k8s.io/v1/nodes", None), "");
    assert_eq!(
        cluster.message,
        "nodes.metrics.k8s.io is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
    );

    let named = forbidden(
        &user,
        &get("/apis/metrics.k8s.io/v1/nodes/n1", None),
        "no RBAC",
    );
    assert_eq!(
        named.message,
        "nodes.metrics.k8s.io \"n1\" is forbidden: User \"alice\" cannot get resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope: no RBAC"
    );

    let path = forbidden(&user, &get("/foo", None), "");
    let body: Value = serde_json::from_slice(&path.to_json()).expect("json");
    assert_eq!(
        body["message"],
        "forbidden: User \"alice\" cannot get path \"/foo\""
    );
    assert_eq!(body["details"], json!({}));
    assert_eq!(path.http, 403);
}
