//! The authenticator chain.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::fake::FakeApi;
use super::*;
use crate::auth::{AuthnError, ReviewLimits, UserInfo};

const SPOOF: &[(&str, &str)] = &[
    ("X-Remote-User", "system:admin"),
    ("X-Remote-Group", "system:masters"),
    ("X-Remote-Extra-Scopes", "all"),
    ("Accept", "application/json"),
];

#[tokio::test]
async fn spoofed_headers_without_a_certificate_are_anonymous_and_stripped() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let mut h = headers(SPOOF);
    let user = auth.authenticate(&mut h, None).await.expect("anonymous");
    assert_eq!(user, UserInfo::anonymous());
    assert!(!has_identity_headers(&h));
    assert!(h.contains_key("accept"), "other headers stay");
}

#[tokio::test]
async fn spoofed_headers_with_a_certificate_from_another_ca_are_not_believed() {
    // Upstream: both certificate authenticators fail to verify, so the union errors -> 401.
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.other, "front-proxy-client", &[]);
    let mut h = headers(SPOOF);
    let result = auth.authenticate(&mut h, Some(&chain)).await;
    assert!(matches!(result, Err(AuthnError::Rejected(_))), "{result:?}");
    assert!(!has_identity_headers(&h));
}

#[tokio::test]
async fn front_proxy_ca_certificate_with_a_name_not_allowed_is_not_believed() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.front_proxy, "someone-else", &[]);
    let mut h = headers(SPOOF);
    let result = auth.authenticate(&mut h, Some(&chain)).await;
    let Err(AuthnError::Rejected(errors)) = result else {
        panic!("believed: {result:?}");
    };
    assert!(
        errors
            .iter()
            .any(|e| e.contains("cn=someone-else is not in the allowed list")),
        "{errors:?}"
    );
    assert!(!has_identity_headers(&h));
}

#[tokio::test]
async fn front_proxy_certificate_without_the_client_auth_usage_is_rejected() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let server_only = leaf(&pki.front_proxy, "front-proxy-client", &[], false, true);
    let mut h = headers(SPOOF);
    let result = auth.authenticate(&mut h, Some(&server_only)).await;
    assert!(matches!(result, Err(AuthnError::Rejected(_))), "{result:?}");
    assert!(!has_identity_headers(&h));
}

pub(super) fn proxied_alice() -> HeaderMap {
    headers(&[
        ("X-Remote-User", "alice"),
        ("X-Remote-Uid", "uid-42"),
        ("X-Remote-Group", "dev"),
        ("X-Remote-Group", "system:authenticated"),
        ("X-Remote-Extra-Foo%2fbar", "v1"),
        ("X-Remote-Extra-Foo%2fbar", "v2"),
        ("X-Remote-Extra-Scopes", "s"),
        ("Authorization", "Bearer should-not-reach-the-handler"),
    ])
}

pub(super) fn alice() -> UserInfo {
    UserInfo {
        name: "alice".into(),
        uid: "uid-42".into(),
        groups: vec!["dev".into(), "system:authenticated".into()],
        extra: BTreeMap::from([
            ("foo/bar".to_owned(), vec!["v1".to_owned(), "v2".to_owned()]),
            ("scopes".to_owned(), vec!["s".to_owned()]),
        ]),
    }
}

#[tokio::test]
async fn valid_front_proxy_request_yields_exactly_the_header_identity() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let mut h = proxied_alice();
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user, alice());
    assert!(!has_identity_headers(&h));
    assert!(!h.contains_key("authorization"));
}

#[tokio::test]
async fn authenticated_group_is_added_once() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let mut h = headers(&[("X-Remote-User", "bob"), ("X-Remote-Group", "dev")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.groups, ["dev", "system:authenticated"]);
}

#[tokio::test]
async fn empty_allowed_names_accept_any_cn_from_the_front_proxy_ca() {
    let pki = Pki::new();
    let data = trust_data(pki.front_proxy.cert_pem(), pki.client.cert_pem(), "null");
    let auth = offline(&data).await;
    let chain = client_cert(&pki.front_proxy, "anything", &[]);
    let mut h = headers(&[("X-Remote-User", "carol")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.name, "carol");
}

#[tokio::test]
async fn replacing_the_configmap_ca_swaps_which_front_proxy_certificate_works() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let old = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let rotated = Ca::new("front-proxy-ca-2").expect("CA");
    let new = client_cert(&rotated, "front-proxy-client", &[]);

    let who = async |chain: &Vec<CertificateDer<'static>>| {
        let mut h = headers(&[("X-Remote-User", "alice")]);
        auth.authenticate(&mut h, Some(chain)).await.map(|u| u.name)
    };
    assert_eq!(who(&old).await.ok().as_deref(), Some("alice"));
    assert!(who(&new).await.is_err());

    auth.update_from_configmap(&trust_data(
        rotated.cert_pem(),
        pki.client.cert_pem(),
        r#"["front-proxy-client"]"#,
    ))
    .expect("applies");
    assert!(who(&old).await.is_err(), "the old CA is no longer trusted");
    assert_eq!(who(&new).await.ok().as_deref(), Some("alice"));
}

#[tokio::test]
async fn a_broken_configmap_update_keeps_the_previous_trust() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let mut broken = pki.configmap();
    broken.insert("requestheader-client-ca-file".into(), "garbage".into());
    assert!(auth.update_from_configmap(&broken).is_err());
    let chain = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let mut h = headers(&[("X-Remote-User", "alice")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.name, "alice");
}

#[tokio::test]
async fn client_ca_certificate_authenticates_as_cn_and_o() {
    let pki = Pki::new();
    let auth = offline(&pki.configmap()).await;
    let chain = client_cert(&pki.client, "jane", &["ops", "dev"]);
    // Spoofed identity headers are ignored: the certificate is not the front proxy's.
    let mut h = headers(&[("X-Remote-User", "system:admin")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.name, "jane");
    assert_eq!(user.groups, ["ops", "dev", "system:authenticated"]);
    assert!(!has_identity_headers(&h));
}

#[tokio::test]
async fn client_ca_flag_file_wins_over_the_configmap() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("client-ca.crt");
    std::fs::write(&path, pki.other.cert_pem()).expect("write");
    let config = AuthnConfig {
        skip_lookup: true,
        client_ca_file: Some(path),
        ..AuthnConfig::default()
    };
    let auth = Authenticator::new(config, None)
        .await
        .expect("authenticator");
    auth.update_from_configmap(&pki.configmap())
        .expect("applies");
    let from_flag = client_cert(&pki.other, "flagged", &[]);
    let from_map = client_cert(&pki.client, "mapped", &[]);
    let mut h = HeaderMap::new();
    let user = auth
        .authenticate(&mut h, Some(&from_flag))
        .await
        .expect("user");
    assert_eq!(user.name, "flagged");
    assert!(auth.authenticate(&mut h, Some(&from_map)).await.is_err());
}

#[tokio::test]
async fn a_reloaded_client_ca_file_and_configmap_updates_each_keep_their_own_half() {
    // As k8s.io/apiserver: the client CA comes from the flag's file (reloaded), the
    // request-header settings from the ConfigMap (watched); neither overwrites the other.
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("client-ca.crt");
    std::fs::write(&path, pki.other.cert_pem()).expect("write");
    let config = AuthnConfig {
        skip_lookup: true,
        client_ca_file: Some(path.clone()),
        ..AuthnConfig::default()
    };
    let auth = Arc::new(
        Authenticator::new(config, None)
            .await
            .expect("authenticator"),
    );
    auth.update_from_configmap(&pki.configmap())
        .expect("applies");
    let reloads = crate::credentials::Reloads::default();
    let mut reloaders = auth.ca_file_reloaders(&reloads);
    assert_eq!(reloaders.len(), 1, "only the flag's file is watched");
    assert!(
        auth.ca_file_reloaders(&reloads).is_empty(),
        "handed out once"
    );

    let rotated = Ca::new("client-ca-2").expect("CA");
    std::fs::write(&path, rotated.cert_pem()).expect("write");
    assert!(reloaders[0].check().expect("reloads"));
    let who = |chain: Vec<CertificateDer<'static>>| {
        let auth = auth.clone();
        async move {
            let mut h = headers(&[("X-Remote-User", "alice")]);
            auth.authenticate(&mut h, Some(&chain))
                .await
                .map(|u| u.name)
        }
    };
    assert_eq!(
        who(client_cert(&rotated, "rotated", &[]))
            .await
            .ok()
            .as_deref(),
        Some("rotated")
    );
    assert!(who(client_cert(&pki.other, "old", &[])).await.is_err());
    assert!(
        who(client_cert(&pki.client, "mapped", &[])).await.is_err(),
        "the ConfigMap's client CA is not used while the flag is set"
    );
    // The front proxy from the ConfigMap still works, and a ConfigMap update does not
    // bring back its client CA.
    let proxy = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    assert_eq!(who(proxy.clone()).await.ok().as_deref(), Some("alice"));
    auth.update_from_configmap(&pki.configmap())
        .expect("applies");
    assert_eq!(
        who(client_cert(&rotated, "rotated", &[]))
            .await
            .ok()
            .as_deref(),
        Some("rotated")
    );
    // A broken file keeps the rotated CA.
    std::fs::write(&path, "garbage").expect("write");
    assert!(reloaders[0].check().is_err());
    assert_eq!(
        who(client_cert(&rotated, "rotated", &[]))
            .await
            .ok()
            .as_deref(),
        Some("rotated")
    );
    assert_eq!(who(proxy).await.ok().as_deref(), Some("alice"));
}

async fn with_tokens(api: &FakeApi, ttl: Duration) -> Authenticator {
    let config = AuthnConfig {
        skip_lookup: true,
        token_webhook_cache_ttl: ttl,
        ..AuthnConfig::default()
    };
    Authenticator::new(config, Some(api.client.clone()))
        .await
        .expect("authenticator")
}

fn bearer(token: &str) -> HeaderMap {
    headers(&[("Authorization", &format!("Bearer {token}"))])
}

#[tokio::test]
async fn token_review_accepts_rejects_and_caches() {
    let api = FakeApi::start().await;
    api.answer_tokens(|review| {
        if review["spec"]["token"] == "good" {
            (
                200,
                json!({"authenticated": true, "user": {"username": "system:serviceaccount:ns:sa",
                       "uid": "u1", "groups": ["system:serviceaccounts"], "extra": {"k": ["v"]}}}),
            )
        } else {
            (200, json!({"authenticated": false}))
        }
    });
    let ttl = Duration::from_secs(10);
    let auth = with_tokens(&api, ttl).await;

    let mut h = bearer("good");
    let user = auth.authenticate(&mut h, None).await.expect("user");
    assert_eq!(user.name, "system:serviceaccount:ns:sa");
    assert_eq!(user.uid, "u1");
    assert_eq!(
        user.groups,
        ["system:serviceaccounts", "system:authenticated"]
    );
    assert_eq!(user.extra["k"], ["v"]);
    assert!(
        !h.contains_key("authorization"),
        "the token goes no further"
    );
    assert_eq!(api.state.token_reviews.lock()[0]["spec"]["token"], "good");

    let mut h = bearer("bad");
    let result = auth.authenticate(&mut h, None).await;
    let Err(AuthnError::Rejected(errors)) = result else {
        panic!("a rejected token must be a 401: {result:?}");
    };
    assert_eq!(errors, ["invalid bearer token"]);
    assert_eq!(api.token_review_count(), 2);

    // Within the TTL neither answer is asked again.
    auth.authenticate(&mut bearer("good"), None)
        .await
        .expect("user");
    assert!(auth.authenticate(&mut bearer("bad"), None).await.is_err());
    assert_eq!(api.token_review_count(), 2);

    jump(ttl + Duration::from_millis(1)).await;
    auth.authenticate(&mut bearer("good"), None)
        .await
        .expect("user");
    assert_eq!(
        api.token_review_count(),
        3,
        "expired entries are reviewed again"
    );
}

#[tokio::test]
async fn token_review_failure_is_a_401_and_not_cached() {
    let api = FakeApi::start().await;
    api.answer_tokens(|_| (500, json!({})));
    let auth = with_tokens(&api, Duration::from_secs(10)).await;
    let result = auth.authenticate(&mut bearer("t"), None).await;
    assert!(matches!(result, Err(AuthnError::Rejected(_))), "{result:?}");
    assert!(auth.authenticate(&mut bearer("t"), None).await.is_err());
    assert_eq!(
        api.token_review_count(),
        4,
        "a 500 is tried once more, no more (kube's retries are off), and not cached"
    );

    api.answer_tokens(|_| {
        (
            200,
            json!({"authenticated": true, "user": {"username": "x"}}),
        )
    });
    let user = auth
        .authenticate(&mut bearer("t"), None)
        .await
        .expect("user");
    assert_eq!(user.name, "x");
}

fn accept_any_token() -> impl Fn(&Value) -> (u16, Value) + Send + Sync {
    |review| {
        (
            200,
            json!({"authenticated": true, "user": {"username": review["spec"]["token"]}}),
        )
    }
}

#[tokio::test]
async fn concurrent_requests_with_one_unseen_token_make_one_token_review() {
    let api = FakeApi::start().await;
    api.answer_tokens(accept_any_token());
    api.hold_reviews();
    let auth = Arc::new(with_tokens(&api, Duration::from_secs(10)).await);
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let auth = auth.clone();
        requests.spawn(async move { auth.authenticate(&mut bearer("flood"), None).await });
    }
    let tokens = auth.tokens.as_ref().expect("token reviewer");
    while tokens.waiting("flood") < 50 {
        tokio::task::yield_now().await;
    }
    api.release(1);
    while let Some(result) = requests.join_next().await {
        let user = result.expect("task").expect("user");
        assert_eq!(user.name, "flood");
    }
    assert_eq!(api.token_review_count(), 1, "every request shared it");
    assert_eq!(tokens.waiting("flood"), 0);
}

#[tokio::test]
async fn token_reviews_past_the_budget_are_throttled_per_source_and_in_all() {
    let api = FakeApi::start().await;
    api.answer_tokens(accept_any_token());
    let config = AuthnConfig {
        skip_lookup: true,
        review_limits: ReviewLimits {
            qps: 2,
            per_source_qps: 1,
        },
        ..AuthnConfig::default()
    };
    let auth = Authenticator::new(config, Some(api.client.clone()))
        .await
        .expect("authenticator");
    let a = Some(IpAddr::from([192, 0, 2, 1]));
    let b = Some(IpAddr::from([192, 0, 2, 2]));
    let from = |token: &'static str, source| {
        let auth = &auth;
        async move {
            auth.authenticate_from(&mut bearer(token), None, source)
                .await
                .map(|a| a.user.name)
        }
    };
    // Bursts of twice the rate: two reviews per source, four in all.
    assert_eq!(from("a1", a).await.ok().as_deref(), Some("a1"));
    assert_eq!(from("a2", a).await.ok().as_deref(), Some("a2"));
    let throttled = from("a3", a).await;
    let Err(AuthnError::Throttled(wait)) = throttled else {
        panic!("a's third unseen token must wait: {throttled:?}");
    };
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(1),
        "{wait:?}"
    );
    assert_eq!(
        from("a1", a).await.ok().as_deref(),
        Some("a1"),
        "cached: free"
    );
    assert_eq!(
        from("b1", b).await.ok().as_deref(),
        Some("b1"),
        "b's own budget"
    );
    assert_eq!(from("b2", b).await.ok().as_deref(), Some("b2"));
    assert!(
        matches!(from("c1", None).await, Err(AuthnError::Throttled(_))),
        "the global budget is spent"
    );
    assert_eq!(api.token_review_count(), 4);
}

#[tokio::test]
async fn a_token_review_dropped_in_transport_is_retried_once() {
    let api = FakeApi::start().await;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    api.answer_tokens(
        move |review| match seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => (0, json!({})),
            _ => accept_any_token()(review),
        },
    );
    let auth = with_tokens(&api, Duration::from_secs(10)).await;
    let user = auth
        .authenticate(&mut bearer("t"), None)
        .await
        .expect("the retry is answered");
    assert_eq!(user.name, "t");
    assert_eq!(api.token_review_count(), 2);
}

#[tokio::test]
async fn a_rejection_reason_from_token_review_is_kept() {
    let api = FakeApi::start().await;
    api.answer_tokens(|_| {
        (
            200,
            json!({"authenticated": false, "error": "token expired"}),
        )
    });
    let auth = with_tokens(&api, Duration::from_secs(10)).await;
    let result = auth.authenticate(&mut bearer("t"), None).await;
    let Err(AuthnError::Rejected(errors)) = result else {
        panic!("{result:?}");
    };
    assert_eq!(errors, ["token expired"]);
}

#[tokio::test]
async fn startup_lookup_reads_the_configmap() {
    let pki = Pki::new();
    let api = FakeApi::start().await;
    api.set_configmap(Some(pki.configmap()));
    let auth = Authenticator::new(AuthnConfig::default(), Some(api.client.clone()))
        .await
        .expect("authenticator");
    let chain = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let mut h = headers(&[("X-Remote-User", "alice")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.name, "alice");
}

#[tokio::test]
async fn startup_lookup_failure_is_fatal_unless_tolerated() {
    let api = FakeApi::start().await;
    api.fail_configmap_get(403);
    let result = Authenticator::new(AuthnConfig::default(), Some(api.client.clone())).await;
    assert!(
        matches!(result, Err(AuthnError::Lookup { .. })),
        "{result:?}"
    );

    let tolerant = AuthnConfig {
        tolerate_lookup_failure: true,
        ..AuthnConfig::default()
    };
    let auth = Authenticator::new(tolerant, Some(api.client.clone()))
        .await
        .expect("tolerated");
    let mut h = headers(SPOOF);
    assert_eq!(
        auth.authenticate(&mut h, None).await.expect("anonymous"),
        UserInfo::anonymous()
    );

    let result = Authenticator::new(AuthnConfig::default(), None).await;
    assert!(matches!(result, Err(AuthnError::NoClient)), "{result:?}");
}

#[tokio::test]
async fn a_missing_configmap_is_not_fatal() {
    let api = FakeApi::start().await;
    let auth = Authenticator::new(AuthnConfig::default(), Some(api.client.clone())).await;
    assert!(auth.is_ok(), "{auth:?}");
}

#[tokio::test]
async fn the_watch_applies_a_rotated_ca_within_seconds() {
    let pki = Pki::new();
    let api = FakeApi::start().await;
    api.set_configmap(Some(pki.configmap()));
    let auth = Arc::new(
        Authenticator::new(AuthnConfig::default(), Some(api.client.clone()))
            .await
            .expect("authenticator"),
    );
    let shutdown = CancellationToken::new();
    let watch = tokio::spawn({
        let (auth, shutdown) = (auth.clone(), shutdown.clone());
        async move { auth.run_watch(shutdown).await }
    });

    let rotated = Ca::new("front-proxy-ca-2").expect("CA");
    let old = client_cert(&pki.front_proxy, "front-proxy-client", &[]);
    let new = client_cert(&rotated, "aggregator", &[]);
    let works = async |chain: &Vec<CertificateDer<'static>>| {
        let mut h = headers(&[("X-Remote-User", "alice")]);
        auth.authenticate(&mut h, Some(chain)).await.is_ok()
    };
    assert!(works(&old).await);
    assert!(!works(&new).await);

    // Once the watcher has listed and opened its watch, rotate CA and allowed names.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while api.watchers() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no watch opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    api.set_configmap(Some(trust_data(
        rotated.cert_pem(),
        pki.client.cert_pem(),
        r#"["aggregator"]"#,
    )));
    while !works(&new).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rotation never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !works(&old).await,
        "the old front-proxy certificate stopped working"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("the watch stops on shutdown")
        .expect("joined");
}

/// root -> intermediate -> leaf with rcgen directly (`tls::issue::Ca` has no intermediates).
fn chain_through_intermediate() -> (String, Vec<CertificateDer<'static>>) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ca_params = |cn: &str| {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p
    };
    let root_key = KeyPair::generate().expect("key");
    let root_params = ca_params("front-proxy-root");
    let root = root_params.self_signed(&root_key).expect("root");
    let root_issuer = Issuer::new(root_params, root_key);
    let mid_key = KeyPair::generate().expect("key");
    let mid_params = ca_params("front-proxy-intermediate");
    let mid = mid_params.signed_by(&mid_key, &root_issuer).expect("mid");
    let mid_issuer = Issuer::new(mid_params, mid_key);
    let leaf_key = KeyPair::generate().expect("key");
    let mut leaf_params = CertificateParams::default();
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "front-proxy-client");
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &mid_issuer).expect("leaf");
    (root.pem(), vec![leaf.der().clone(), mid.der().clone()])
}

#[tokio::test]
async fn intermediates_sent_by_the_peer_complete_the_chain() {
    let pki = Pki::new();
    let (root_pem, chain) = chain_through_intermediate();
    let auth = offline(&trust_data(
        &root_pem,
        pki.client.cert_pem(),
        r#"["front-proxy-client"]"#,
    ))
    .await;
    let mut h = headers(&[("X-Remote-User", "alice")]);
    let user = auth.authenticate(&mut h, Some(&chain)).await.expect("user");
    assert_eq!(user.name, "alice");
    let mut h = headers(&[("X-Remote-User", "alice")]);
    assert!(
        auth.authenticate(&mut h, Some(&chain[..1])).await.is_err(),
        "without the intermediate the leaf does not chain to the root"
    );
}
