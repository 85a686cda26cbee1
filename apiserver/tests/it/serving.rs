//! The listening socket as k8s.io/apiserver binds it, and headers every response carries.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use apiserver::serve;
use http::{HeaderValue, StatusCode};
use tokio::net::TcpStream;

use crate::support::{Client, start};

/// `--bind-address=0.0.0.0` (the default) listens on IPv6 as well, as Go's
/// `net.Listen("tcp", "0.0.0.0:port")` does: the aggregator reaches the pod on an IPv6-only
/// cluster. A specific address listens there only.
#[tokio::test]
async fn the_unspecified_address_listens_on_both_families() {
    let listener = serve::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0), false).unwrap();
    let port = listener.local_addr().unwrap().port();
    let v6 = std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
    if !v6 {
        eprintln!("this host has no IPv6 loopback: only the IPv4 half is checked");
    }
    let families = [
        std::net::IpAddr::from(Ipv4Addr::LOCALHOST),
        Ipv6Addr::LOCALHOST.into(),
    ];
    for ip in families.into_iter().filter(|ip| v6 || ip.is_ipv4()) {
        let connecting = TcpStream::connect(SocketAddr::new(ip, port));
        let (connected, accepted) = tokio::join!(connecting, listener.accept());
        connected.unwrap_or_else(|e| panic!("connecting to {ip}: {e}"));
        accepted.unwrap();
    }
    let v4_only = serve::bind(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0), false).unwrap();
    let port = v4_only.local_addr().unwrap().port();
    if v6 {
        assert!(
            TcpStream::connect(SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port))
                .await
                .is_err()
        );
    }
}

/// `--permit-port-sharing`: a second listener on the same address and port, as
/// SO_REUSEPORT allows; without it the port is taken.
#[tokio::test]
async fn port_sharing_lets_a_second_server_bind_the_port() {
    let first = serve::bind(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0), true).unwrap();
    let addr = first.local_addr().unwrap();
    let second = serve::bind(addr, true).expect("a second listener with port sharing");
    assert_eq!(second.local_addr().unwrap(), addr);
    let alone = serve::bind(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0), false).unwrap();
    let error = serve::bind(alone.local_addr().unwrap(), false).unwrap_err();
    assert!(error.to_string().contains("in use"), "{error}");
}

/// `--strict-transport-security-directives`: every response has the header, whatever
/// answered it, over both protocols; without the flag, none has.
#[tokio::test]
async fn hsts_is_on_every_response_when_asked() {
    let hsts = "max-age=31536000; includeSubDomains";
    let server = start(|s| s.serving.hsts = Some(HeaderValue::from_static(hsts))).await;
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let client = Client::insecure().alpn(&[alpn]);
        for (path, status) in [
            ("/livez", StatusCode::OK),
            ("/no/such/path", StatusCode::NOT_FOUND),
            (
                "/apis/metrics.k8s.io/v1beta1/nodes/none",
                StatusCode::NOT_FOUND,
            ),
        ] {
            let reply = client.get(server.addr, path).await;
            assert_eq!(reply.status, status, "{path}");
            assert_eq!(reply.headers["strict-transport-security"], hsts, "{path}");
        }
    }
    server.shutdown.cancel();
    let server = start(|_| {}).await;
    let reply = Client::insecure().get(server.addr, "/livez").await;
    assert!(reply.headers.get("strict-transport-security").is_none());
    server.shutdown.cancel();
}
