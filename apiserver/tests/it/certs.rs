//! Serving certificates: self-signed in --cert-dir, files reloaded without a restart.

use std::time::Duration;

use apiserver::config::ServingCert;
use clap::Parser as _;
use http::StatusCode;

use crate::support::{Client, eventually, sans_of, served_leaf, start, start_with};

#[tokio::test]
async fn self_signed_certificate_in_cert_dir_verifies_for_the_service_names() {
    let server = start(|_| {}).await;
    let cert_path = server.cert_dir().join("apiserver.crt");
    let key_path = server.cert_dir().join("apiserver.key");
    assert!(key_path.exists());
    let pem = std::fs::read(&cert_path).unwrap();
    let der = tls::pem::certs_from_slice(&pem, "apiserver.crt").unwrap();
    let sans = sans_of(&der[0]);
    for name in [
        "localhost",
        "127.0.0.1",
        "metrics-server",
        "metrics-server.kube-system.svc",
        "metrics-server.kube-system.svc.cluster.local",
    ] {
        assert!(sans.iter().any(|s| s == name), "{name} not in {sans:?}");
    }
    // The served certificate is the file's, and a client trusting it verifies every name.
    assert_eq!(
        served_leaf(&Client::insecure(), server.addr).await.unwrap(),
        der[0].to_vec()
    );
    for name in ["localhost", "127.0.0.1", "metrics-server.kube-system.svc"] {
        let reply = Client::trusting(der.clone(), name)
            .get(server.addr, "/livez")
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{name}");
    }
    assert!(
        Client::trusting(der.clone(), "other.example")
            .connect(server.addr)
            .await
            .is_err(),
        "a name outside the SANs must not verify"
    );
    server.shutdown.cancel();
    server.task.await.unwrap().unwrap();

    // A restart on the same directory reuses the certificate.
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::copy(&cert_path, certs.join("apiserver.crt")).unwrap();
    std::fs::copy(&key_path, certs.join("apiserver.key")).unwrap();
    let again = start_with(|_| {}, Vec::new(), Some(tmp)).await;
    assert_eq!(
        served_leaf(&Client::insecure(), again.addr).await.unwrap(),
        der[0].to_vec()
    );
    again.shutdown.cancel();
}

#[tokio::test]
async fn serving_certificate_files_are_reloaded_without_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tls::issue::Ca::new("serving-ca").unwrap();
    let leaf = |name: &str| {
        ca.issue(&tls::issue::LeafSpec {
            common_name: name.into(),
            sans: vec!["localhost".into(), format!("{name}.test")],
            server: true,
            ..Default::default()
        })
        .unwrap()
    };
    let cert_file = tmp.path().join("tls.crt");
    let key_file = tmp.path().join("tls.key");
    let first = leaf("first");
    std::fs::write(&cert_file, &first.cert_pem).unwrap();
    std::fs::write(&key_file, &first.key_pem).unwrap();
    let files = ServingCert::Files {
        cert: cert_file.clone(),
        key: key_file.clone(),
    };
    let server = start_with(|s| s.listen.cert = files, Vec::new(), Some(tmp)).await;
    let client = Client::trusting(vec![ca.cert().clone()], "localhost");
    assert_eq!(
        served_leaf(&client, server.addr).await.unwrap(),
        first.identity.chain[0].to_vec()
    );
    assert!(
        !server.cert_dir().exists(),
        "no self-signed certificate when files are given"
    );

    // Replace both files: the new certificate is served within seconds.
    let second = leaf("second");
    std::fs::write(&key_file, &second.key_pem).unwrap();
    std::fs::write(&cert_file, &second.cert_pem).unwrap();
    let took = eventually(Duration::from_secs(5), || async {
        let served = served_leaf(&client, server.addr).await.ok()?;
        (served == second.identity.chain[0].to_vec()).then_some(())
    })
    .await;
    assert!(took.is_some(), "the new certificate was not served");
    assert!(
        sans_of(&served_leaf(&client, server.addr).await.unwrap())
            .contains(&"second.test".to_owned())
    );

    // A broken replacement is refused, and the last good certificate stays.
    let before = server.reloads.counts();
    std::fs::write(&cert_file, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        server.reloads.wait_for(|c| c.rejected > before.rejected),
    )
    .await
    .expect("the reloader looked at the broken file");
    assert_eq!(
        served_leaf(&client, server.addr).await.unwrap(),
        second.identity.chain[0].to_vec()
    );
    let reply = client.get(server.addr, "/livez").await;
    assert_eq!(reply.status, StatusCode::OK);
    server.shutdown.cancel();
}

#[tokio::test]
async fn tls13_only_when_asked() {
    let server = start(|s| s.serving.tls.tls13_only = true).await;
    let stream = Client::insecure().connect(server.addr).await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    server.shutdown.cancel();
}

/// `--tls-sni-cert-key`: the certificate for the name a client asks for, as k8s.io/apiserver
/// picks it (exact before wildcard, a pair's patterns before the names in a pair's
/// certificate), the default one otherwise; a pair's files are reloaded like the default's.
#[tokio::test]
async fn sni_certificates_are_chosen_by_the_name_asked_for_and_reloaded() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tls::issue::Ca::new("serving-ca").unwrap();
    let leaf = |cn: &str, sans: &[&str]| {
        ca.issue(&tls::issue::LeafSpec {
            common_name: cn.into(),
            sans: sans.iter().map(|s| (*s).to_owned()).collect(),
            server: true,
            ..Default::default()
        })
        .unwrap()
    };
    let dir = tmp.path().to_path_buf();
    let write = |name: &str, issued: &tls::issue::Issued| {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&key, &issued.key_pem).unwrap();
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        (cert, key)
    };
    // Its own names (CN and SANs) pick `own`; `patterns` is for what its flag lists, not
    // for the names in it; `shadowed` lists a name `patterns` lists too, and comes later.
    let own = leaf("own.example", &["alt.own.example"]);
    let patterns = leaf("patterns", &["unlisted.example"]);
    let shadowed = leaf("shadowed", &["shadowed.example"]);
    let (own_cert, own_key) = write("own", &own);
    let (patterns_cert, patterns_key) = write("patterns", &patterns);
    let (shadowed_cert, shadowed_key) = write("shadowed", &shadowed);
    let sni = [
        format!("{},{}", own_cert.display(), own_key.display()),
        format!(
            "{},{}:*.wild.example,exact.wild.example,EXPLICIT.example",
            patterns_cert.display(),
            patterns_key.display()
        ),
        format!(
            "{},{}:explicit.example",
            shadowed_cert.display(),
            shadowed_key.display()
        ),
    ];
    let flags = apiserver::cli::Flags::try_parse_from(
        std::iter::once("metrics-server".to_owned())
            .chain(sni.iter().map(|v| format!("--tls-sni-cert-key={v}"))),
    )
    .unwrap();
    let sni = flags.sni_certs().unwrap();
    let server = start_with(|s| s.listen.sni = sni, Vec::new(), Some(tmp)).await;
    let default = std::fs::read(server.cert_dir().join("apiserver.crt")).unwrap();
    let default = tls::pem::certs_from_slice(&default, "default").unwrap()[0].to_vec();
    let leaf_for = |name: &'static str| {
        let client = Client {
            server_name: name.to_owned(),
            ..Client::insecure()
        };
        let addr = server.addr;
        async move { served_leaf(&client, addr).await.unwrap() }
    };
    let der = |issued: &tls::issue::Issued| issued.identity.chain[0].to_vec();
    assert_eq!(leaf_for("own.example").await, der(&own), "its CN");
    assert_eq!(
        leaf_for("ALT.own.example").await,
        der(&own),
        "a SAN, any case"
    );
    assert_eq!(
        leaf_for("a.wild.example").await,
        der(&patterns),
        "a wildcard"
    );
    assert_eq!(leaf_for("exact.wild.example").await, der(&patterns));
    assert_eq!(
        leaf_for("explicit.example").await,
        der(&patterns),
        "first pair wins"
    );
    assert_eq!(
        leaf_for("a.b.wild.example").await,
        default,
        "one label only"
    );
    assert_eq!(
        leaf_for("unlisted.example").await,
        default,
        "patterns replace its names"
    );
    assert_eq!(leaf_for("localhost").await, default);
    assert_eq!(
        leaf_for("127.0.0.1").await,
        default,
        "no SNI for an address"
    );

    let renewed = leaf("own.example", &["alt.own.example"]);
    write("own", &renewed);
    let took = eventually(Duration::from_secs(5), || async {
        (leaf_for("own.example").await == der(&renewed)).then_some(())
    })
    .await;
    assert!(took.is_some(), "the renewed SNI certificate was not served");
    server.shutdown.cancel();
}
