//! Serving certificates: self-signed in --cert-dir, files reloaded without a restart.

use std::time::Duration;

use apiserver::config::ServingCert;
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
