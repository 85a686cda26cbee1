//! The kubelet credentials from flags and kubeconfig, and their reloaders.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;

use super::*;

/// The default kubelet settings, edited.
fn flags(edit: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default();
    edit(&mut config);
    config
}

/// The default kubelet settings.
fn defaults() -> Config {
    Config::default()
}

/// `--kubelet-insecure-tls`.
fn insecure() -> Config {
    flags(|c| c.insecure_tls = true)
}

/// The client settings for these flags and kubeconfig, over the default transport.
fn config(flags: &Config, kube: Option<&kube::Config>) -> Result<client::Config, FlagError> {
    settings(flags, client::Config::default(), kube).map(|s| s.config)
}

#[test]
fn kubelet_credentials_come_from_the_kubeconfig() {
    let ca = tls::issue::Ca::new("cluster-ca").unwrap();
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.root_cert = Some(vec![ca.cert().to_vec()]);
    kube.auth_info.token = Some("sa-token\n".to_owned().into());
    let c = config(&defaults(), Some(&kube)).unwrap();
    match &c.verify {
        tls::client::Verify::Roots(roots) => assert_eq!(roots, &[ca.cert().clone()]),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.bearer_token.as_deref(), Some("sa-token"));
    assert!(!c.plain_http);
    assert_eq!(c.timeout, Duration::from_secs(10));
    assert_eq!(c.max_body_bytes, 64 << 20);
    assert!(c.keep_alive);
    let transport = client::Config {
        keep_alive: false,
        ..client::Config::default()
    };
    let closed = settings(&defaults(), transport, Some(&kube))
        .unwrap()
        .config;
    assert!(!closed.keep_alive);
}

#[test]
fn kubelet_flags_override_the_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let ca = tls::issue::Ca::new("kubelet-ca").unwrap();
    let ca_path = dir.path().join("ca.crt");
    std::fs::write(&ca_path, ca.cert_pem()).unwrap();
    let client = ca
        .issue(&tls::issue::LeafSpec {
            common_name: "metrics-server".into(),
            client: true,
            ..Default::default()
        })
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("c.crt"), dir.path().join("c.key"));
    std::fs::write(&cert_path, &client.cert_pem).unwrap();
    std::fs::write(&key_path, &client.key_pem).unwrap();
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.root_cert = Some(vec![tls::issue::Ca::new("other").unwrap().cert().to_vec()]);
    let c = config(
        &flags(|c| {
            c.ca_file = Some(ca_path.clone());
            c.client_cert = Some((cert_path.clone(), key_path.clone()));
        }),
        Some(&kube),
    )
    .unwrap();
    match &c.verify {
        tls::client::Verify::Roots(roots) => assert_eq!(roots, &[ca.cert().clone()]),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.identity.unwrap().chain, client.identity.chain);

    let c = config(&insecure(), Some(&kube)).unwrap();
    assert!(matches!(c.verify, tls::client::Verify::Insecure));
}

#[test]
fn completely_insecure_sends_no_credentials() {
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.auth_info.token = Some("secret".to_owned().into());
    let plain = client::Config {
        plain_http: true,
        ..client::Config::default()
    };
    let c = settings(&defaults(), plain, Some(&kube)).unwrap().config;
    assert!(c.plain_http);
    assert!(c.bearer_token.is_none());
    assert!(c.identity.is_none());
}

#[test]
fn kubeconfig_client_certificate_data_is_used() {
    let ca = tls::issue::Ca::new("cluster-ca").unwrap();
    let client = ca
        .issue(&tls::issue::LeafSpec {
            common_name: "admin".into(),
            client: true,
            ..Default::default()
        })
        .unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.auth_info.client_certificate_data = Some(b64(&client.cert_pem));
    kube.auth_info.client_key_data = Some(b64(&client.key_pem).into());
    let c = config(&defaults(), Some(&kube)).unwrap();
    assert_eq!(c.identity.unwrap().chain, client.identity.chain);
    // Garbage is a configuration error, not a panic.
    kube.auth_info.client_certificate_data = Some("!!!".to_owned());
    let err = config(&defaults(), Some(&kube)).unwrap_err();
    assert_eq!(err.flag, "--kubeconfig");
}

#[test]
fn missing_kubelet_ca_file_is_a_configuration_error() {
    let err = config(
        &flags(|c| c.ca_file = Some("/nonexistent/ca.crt".into())),
        None,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--kubelet-certificate-authority: "),
        "{err}"
    );
}

/// A kubeconfig whose user reads its token from `token_file`.
fn token_file_kubeconfig(token_file: &Path) -> kube::Config {
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.auth_info.token_file = Some(token_file.display().to_string());
    kube
}

fn names(reloaders: &[Reloader]) -> Vec<&'static str> {
    reloaders.iter().map(Reloader::what).collect()
}

#[test]
fn the_token_file_is_read_trimmed_and_watched() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let kube = token_file_kubeconfig(&token);
    let s = settings(&defaults(), client::Config::default(), Some(&kube)).unwrap();
    assert_eq!(s.config.bearer_token.as_deref(), Some("first"));
    let client = Client::new(s.config).unwrap();
    let mut reloaders = s.files.reloaders(&client, &Reloads::default());
    assert_eq!(names(&reloaders), ["kubelet bearer token"]);
    let reloader = &mut reloaders[0];
    assert!(!reloader.check().unwrap());
    std::fs::write(&token, "second").unwrap();
    assert!(reloader.check().unwrap());
    // Empty, whitespace, or not a header value: refused, the last good token stays.
    for bad in ["", " \n", "bad\u{7f}token"] {
        std::fs::write(&token, bad).unwrap();
        let err = reloader.check().unwrap_err();
        assert!(
            err.to_string().starts_with(&token.display().to_string()),
            "{err}"
        );
    }
    // A literal token in the kubeconfig wins over the file and is not watched.
    let mut literal = token_file_kubeconfig(&token);
    literal.auth_info.token = Some("literal".to_owned().into());
    let s = settings(&defaults(), client::Config::default(), Some(&literal)).unwrap();
    assert_eq!(s.config.bearer_token.as_deref(), Some("literal"));
    assert!(s.files.is_empty());
}

#[test]
fn an_empty_or_missing_token_file_at_start_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "\n").unwrap();
    let err = config(&defaults(), Some(&token_file_kubeconfig(&token))).unwrap_err();
    assert_eq!(err.flag, "--kubeconfig");
    assert!(err.to_string().contains("the token file is empty"), "{err}");
    let err = config(
        &defaults(),
        Some(&token_file_kubeconfig(&dir.path().join("absent"))),
    )
    .unwrap_err();
    assert_eq!(err.flag, "--kubeconfig");
}

struct Pki {
    dir: tempfile::TempDir,
    ca: tls::issue::Ca,
}

impl Pki {
    fn new() -> Self {
        let files = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca: tls::issue::Ca::new("kubelet-ca").unwrap(),
        };
        std::fs::write(files.path("ca.crt"), files.ca.cert_pem()).unwrap();
        files.write_identity(&files.ca.issue(&client_spec()).unwrap());
        files
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write_identity(&self, issued: &tls::issue::Issued) {
        std::fs::write(self.path("client.crt"), &issued.cert_pem).unwrap();
        std::fs::write(self.path("client.key"), &issued.key_pem).unwrap();
    }

    fn flags(&self) -> Config {
        flags(|c| {
            c.ca_file = Some(self.path("ca.crt"));
            c.client_cert = Some((self.path("client.crt"), self.path("client.key")));
        })
    }
}

fn client_spec() -> tls::issue::LeafSpec {
    tls::issue::LeafSpec {
        common_name: "metrics-server".into(),
        client: true,
        ..Default::default()
    }
}

#[test]
fn the_client_certificate_and_ca_files_are_watched_and_bad_ones_refused() {
    let files = Pki::new();
    let s = settings(&files.flags(), client::Config::default(), None).unwrap();
    let client = Client::new(s.config).unwrap();
    let mut reloaders = s.files.reloaders(&client, &Reloads::default());
    assert_eq!(
        names(&reloaders),
        [
            "kubelet client certificate",
            "kubelet certificate authority"
        ]
    );
    let [identity, ca] = reloaders.as_mut_slice() else {
        unreachable!()
    };
    assert!(!identity.check().unwrap());
    assert!(!ca.check().unwrap());

    // A new pair from another CA.
    let other = tls::issue::Ca::new("kubelet-client-ca-2").unwrap();
    let two = other.issue(&client_spec()).unwrap();
    files.write_identity(&two);
    assert!(identity.check().unwrap());
    // A certificate whose key is not there yet (written one file at a time): refused.
    let three = other.issue(&client_spec()).unwrap();
    std::fs::write(files.path("client.crt"), &three.cert_pem).unwrap();
    let err = identity.check().unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
    // Then the key: taken.
    std::fs::write(files.path("client.key"), &three.key_pem).unwrap();
    assert!(identity.check().unwrap());
    // Garbage PEM: refused.
    std::fs::write(files.path("client.crt"), "not a certificate").unwrap();
    assert!(identity.check().is_err());

    // A CA bundle with both CAs: taken; garbage or an empty file: refused.
    std::fs::write(
        files.path("ca.crt"),
        format!("{}{}", files.ca.cert_pem(), other.cert_pem()),
    )
    .unwrap();
    assert!(ca.check().unwrap());
    for bad in [
        "",
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    ] {
        std::fs::write(files.path("ca.crt"), bad).unwrap();
        let err = ca.check().unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&files.path("ca.crt").display().to_string()),
            "{err}"
        );
    }
}

#[test]
fn the_in_cluster_ca_file_is_watched_when_no_flag_names_a_ca() {
    let files = Pki::new();
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.root_cert_file = Some(files.path("ca.crt"));
    kube.root_cert = Some(vec![files.ca.cert().to_vec()]);
    let s = settings(&defaults(), client::Config::default(), Some(&kube)).unwrap();
    match &s.config.verify {
        tls::client::Verify::Roots(roots) => assert_eq!(roots, &[files.ca.cert().clone()]),
        other => panic!("{other:?}"),
    }
    let client = Client::new(s.config).unwrap();
    let reloaders = s.files.reloaders(&client, &Reloads::default());
    assert_eq!(names(&reloaders), ["kubelet certificate authority"]);
    // With --kubelet-insecure-tls nothing is verified, so nothing is watched.
    let s = settings(&insecure(), client::Config::default(), Some(&kube)).unwrap();
    assert!(s.files.is_empty());
}

#[test]
fn the_kubeconfig_client_certificate_files_are_watched_but_not_its_data() {
    let files = Pki::new();
    let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    kube.auth_info.client_certificate = Some(files.path("client.crt").display().to_string());
    kube.auth_info.client_key = Some(files.path("client.key").display().to_string());
    let s = settings(&insecure(), client::Config::default(), Some(&kube)).unwrap();
    assert!(s.config.identity.is_some());
    let client = Client::new(s.config).unwrap();
    let mut reloaders = s.files.reloaders(&client, &Reloads::default());
    assert_eq!(names(&reloaders), ["kubelet client certificate"]);
    files.write_identity(&files.ca.issue(&client_spec()).unwrap());
    assert!(reloaders[0].check().unwrap());

    // Inline data (or a mix of data and a file) is read once.
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let issued = files.ca.issue(&client_spec()).unwrap();
    kube.auth_info.client_certificate_data = Some(b64(&issued.cert_pem));
    kube.auth_info.client_key = None;
    kube.auth_info.client_key_data = Some(b64(&issued.key_pem).into());
    let s = settings(&insecure(), client::Config::default(), Some(&kube)).unwrap();
    assert_eq!(s.config.identity.unwrap().chain, issued.identity.chain);
    assert!(s.files.is_empty());
}

/// A kubeconfig user whose credentials only kube-rs can use against the API (an exec plugin,
/// an auth provider, basic auth) leaves kubelets without credentials: said at start, not
/// found out from 401s.
#[test]
fn credentials_kubelets_cannot_be_sent_are_warned_about() {
    let warned = |edit: fn(&mut kube::Config)| {
        let mut kube = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        kube.accept_invalid_certs = true;
        edit(&mut kube);
        let logs = crate::credentials::tests::Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let c = tracing::subscriber::with_default(subscriber, || {
            config(&defaults(), Some(&kube)).unwrap()
        });
        assert!(c.bearer_token.is_none() && c.identity.is_none());
        logs.lines()
            .into_iter()
            .find(|l| l.contains("kubelets are asked without credentials"))
    };
    let exec = warned(|k| {
        k.auth_info.exec = Some(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "aws",
                "args": ["eks", "get-token"],
            }))
            .unwrap(),
        );
    });
    assert!(exec.is_some_and(|l| l.contains("WARN") && l.contains("credentials=\"exec\"")));
    assert!(warned(|k| k.auth_info.username = Some("admin".to_owned())).is_some());
    assert!(
        warned(|_| {}).is_none(),
        "no credentials at all is not a kind kubelets lack"
    );
}
