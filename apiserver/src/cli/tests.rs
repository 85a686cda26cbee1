use std::path::PathBuf;

use super::*;

fn parse(args: &[&str]) -> Flags {
    let mut argv = vec!["metrics-server"];
    argv.extend_from_slice(args);
    Flags::try_parse_from(argv).unwrap()
}

fn error(args: &[&str]) -> String {
    parse(args).validate().unwrap_err().to_string()
}

#[test]
fn defaults_match_metrics_server() {
    let c = parse(&[]);
    assert_eq!(c.resolution(), Duration::from_secs(60));
    assert_eq!(c.server.metric_resolution.to_string(), "1m0s");
    assert_eq!(c.kubelet.kubelet_port, 10250);
    assert_eq!(c.kubelet.kubelet_request_timeout.0, Duration::from_secs(10));
    assert_eq!(
        c.kubelet.kubelet_preferred_address_types,
        [
            "Hostname",
            "InternalDNS",
            "InternalIP",
            "ExternalDNS",
            "ExternalIP"
        ]
    );
    assert_eq!(c.serving.secure_port, 443);
    assert_eq!(c.serving.bind_address.to_string(), "0.0.0.0");
    assert_eq!(
        c.serving.cert_dir,
        PathBuf::from("apiserver.local.config/certificates")
    );
    assert_eq!(c.generic.max_requests_inflight, 400);
    assert_eq!(
        c.authorization.authorization_always_allow_paths,
        ["/healthz", "/readyz", "/livez"]
    );
    assert_eq!(
        c.authentication.requestheader_username_headers,
        ["x-remote-user"]
    );
    assert_eq!(
        c.authentication.requestheader_group_headers,
        ["x-remote-group"]
    );
    assert_eq!(
        c.authentication.requestheader_extra_headers_prefix,
        ["x-remote-extra-"]
    );
    assert_eq!(
        c.authentication.authentication_token_webhook_cache_ttl.0,
        Duration::from_secs(10)
    );
    assert!(c.features.profiling);
    assert!(!c.kubelet.kubelet_insecure_tls);
    assert!(!c.server.version);
    assert_eq!(c.kubelet.kubelet_max_body_bytes.0, 64 << 20);
    assert_eq!(c.kubelet.kubelet_source, KubeletSource::Resource);
    assert_eq!(c.logging.logging_format, LoggingFormat::Text);
    assert_eq!(c.logging.verbosity, 0);
    assert_eq!(c.staleness(), Duration::from_secs(120));
    assert_eq!(c.readiness_timeout(), Some(Duration::from_secs(120)));
    for san in ["localhost", "127.0.0.1", "metrics-server.kube-system.svc"] {
        assert!(
            c.serving.serving_cert_sans.iter().any(|s| s == san),
            "{san}"
        );
    }
    c.validate().unwrap();
}

/// The typed defaults are the flag defaults: tests and benches that build [`Settings`] as a
/// value run what the binary runs with no flags.
#[test]
fn no_flags_are_the_default_settings() {
    let parsed = parse(&[]).settings().unwrap();
    assert_eq!(
        format!("{parsed:#?}"),
        format!("{:#?}", Settings::default())
    );
    let parsed = parse(&["--metric-resolution=15s"]).settings().unwrap();
    assert_eq!(
        format!("{parsed:#?}"),
        format!("{:#?}", Settings::for_resolution(Duration::from_secs(15)))
    );
}

#[test]
fn kubelet_answers_are_asked_gzipped_unless_turned_off() {
    let on = parse(&[]).settings().unwrap();
    assert!(on.kubelet_client.compression);
    for off in ["--kubelet-compression=false", "--kubelet-compression=0"] {
        assert!(
            !parse(&[off]).settings().unwrap().kubelet_client.compression,
            "{off}"
        );
    }
}

#[test]
fn the_summary_warmup_is_on_unless_turned_off() {
    assert!(parse(&[]).settings().unwrap().scrape.summary_warmup);
    for off in [
        "--kubelet-summary-warmup=false",
        "--kubelet-summary-warmup=0",
    ] {
        assert!(
            !parse(&[off]).settings().unwrap().scrape.summary_warmup,
            "{off}"
        );
    }
}

#[test]
fn shipped_manifest_flags_parse() {
    let c = parse(&[
        "--cert-dir=/tmp",
        "--secure-port=10250",
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        "--kubelet-use-node-status-port",
        "--metric-resolution=15s",
        "--shutdown-delay-duration=5s",
        "--kubelet-insecure-tls",
        "--v=4",
        "--node-selector=metrics-server-skip!=true",
    ]);
    assert_eq!(c.serving.secure_port, 10250);
    assert_eq!(
        c.kubelet.kubelet_preferred_address_types,
        ["InternalIP", "ExternalIP", "Hostname"]
    );
    assert!(c.kubelet.kubelet_use_node_status_port);
    assert!(c.kubelet.kubelet_insecure_tls);
    assert_eq!(c.resolution(), Duration::from_secs(15));
    assert_eq!(c.logging.verbosity, 4);
    assert_eq!(c.kubelet.node_selector, "metrics-server-skip!=true");
    assert_eq!(c.staleness(), Duration::from_secs(30));
    assert_eq!(c.settings().unwrap().shutdown_delay, Duration::from_secs(5));
    c.validate().unwrap();
}

#[test]
fn go_style_bools_and_short_flags() {
    let c = parse(&[
        "--kubelet-insecure-tls=false",
        "--profiling=false",
        "-v",
        "2",
        "-l",
        "a=b",
    ]);
    assert!(!c.kubelet.kubelet_insecure_tls);
    assert!(!c.features.profiling);
    assert_eq!(c.logging.verbosity, 2);
    assert_eq!(c.kubelet.node_selector, "a=b");
    let c = parse(&["--kubelet-insecure-tls=true", "--version", "-v=6"]);
    assert!(c.kubelet.kubelet_insecure_tls);
    assert!(c.server.version);
    assert_eq!(c.logging.verbosity, 6);
    assert!(Flags::try_parse_from(["metrics-server", "--kubelet-insecure-tls=maybe"]).is_err());
}

#[test]
fn a_repeated_flag_takes_the_last_value_as_pflag_does() {
    let c = parse(&[
        "--metric-resolution=15s",
        "--metric-resolution=30s",
        "--v=1",
        "--v=3",
    ]);
    assert_eq!(c.resolution(), Duration::from_secs(30));
    assert_eq!(c.logging.verbosity, 3);
}

#[test]
fn ours_parse() {
    let c = parse(&[
        "--kubelet-source=summary",
        "--kubelet-max-body-bytes=1Gi",
        "--metric-staleness=5m",
        "--readiness-timeout=0s",
        "--logging-format=json",
        "--tls-min-version=VersionTLS13",
        "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
    ]);
    assert_eq!(c.kubelet.kubelet_source, KubeletSource::Summary);
    assert_eq!(c.kubelet.kubelet_max_body_bytes.0, 1 << 30);
    assert_eq!(c.staleness(), Duration::from_secs(300));
    assert_eq!(c.readiness_timeout(), None);
    assert_eq!(c.logging.logging_format, LoggingFormat::Json);
    assert_eq!(c.serving.tls_min_version, Some(TlsVersion::Tls13));
    assert_eq!(c.serving.tls_cipher_suites.len(), 2);
    assert!(Flags::try_parse_from(["metrics-server", "--logging-format=xml"]).is_err());
    assert!(Flags::try_parse_from(["metrics-server", "--metric-resolution=15"]).is_err());
}

#[test]
fn resolution_at_least_10s() {
    assert_eq!(
        error(&["--metric-resolution=5s", "--kubelet-request-timeout=1s"]),
        "metric-resolution should be a time duration at least 10s, but value 5s provided"
    );
    assert_eq!(
        error(&["--metric-resolution=9.999s", "--kubelet-request-timeout=1s"]),
        "metric-resolution should be a time duration at least 10s, but value 9.999s provided"
    );
}

#[test]
fn resolution_must_leave_room_for_the_timeout() {
    parse(&["--metric-resolution=10s", "--kubelet-request-timeout=9s"])
        .validate()
        .unwrap();
    assert_eq!(
        error(&["--metric-resolution=10s", "--kubelet-request-timeout=10s"]),
        "metric-resolution should be larger than kubelet-request-timeout"
    );
    assert_eq!(
        error(&[
            "--metric-resolution=10s",
            "--kubelet-request-timeout=9001ms"
        ]),
        "metric-resolution should be larger than kubelet-request-timeout"
    );
    // The default timeout (10s) against a 10s resolution.
    assert_eq!(
        error(&["--metric-resolution=10s"]),
        "metric-resolution should be larger than kubelet-request-timeout"
    );
}

#[test]
fn request_timeout_positive() {
    assert_eq!(
        error(&["--kubelet-request-timeout=0s"]),
        "kubelet-request-timeout should be positive"
    );
}

#[test]
fn ca_conflicts_with_insecure_tls() {
    assert_eq!(
        error(&[
            "--kubelet-certificate-authority=/ca.crt",
            "--kubelet-insecure-tls"
        ]),
        "cannot use both --kubelet-certificate-authority and --kubelet-insecure-tls"
    );
    assert_eq!(
        error(&[
            "--kubelet-certificate-authority-text=PEM",
            "--kubelet-insecure-tls"
        ]),
        "cannot use both --kubelet-certificate-authority-text and --kubelet-insecure-tls"
    );
    assert_eq!(
        error(&[
            "--kubelet-certificate-authority=/ca.crt",
            "--kubelet-certificate-authority-text=PEM"
        ]),
        "cannot use both --kubelet-certificate-authority and --kubelet-certificate-authority-text"
    );
}

#[test]
fn client_key_and_cert_go_together() {
    let msg = "need both --kubelet-client-key and --kubelet-client-certificate";
    assert_eq!(error(&["--kubelet-client-key=/k"]), msg);
    assert_eq!(error(&["--kubelet-client-certificate=/c"]), msg);
    parse(&["--kubelet-client-key=/k", "--kubelet-client-certificate=/c"])
        .validate()
        .unwrap();
}

#[test]
fn completely_insecure_excludes_every_tls_option() {
    let plain = "--deprecated-kubelet-completely-insecure";
    parse(&[plain]).validate().unwrap();
    assert_eq!(
        error(&[
            plain,
            "--kubelet-client-key=/k",
            "--kubelet-client-certificate=/c"
        ]),
        "cannot use both --kubelet-client-key and --deprecated-kubelet-completely-insecure"
    );
    assert_eq!(
        error(&[plain, "--kubelet-insecure-tls"]),
        "cannot use both --kubelet-insecure-tls and --deprecated-kubelet-completely-insecure"
    );
    assert_eq!(
        error(&[plain, "--kubelet-certificate-authority=/ca"]),
        "cannot use both --kubelet-certificate-authority and --deprecated-kubelet-completely-insecure"
    );
    assert_eq!(
        error(&[plain, "--kubelet-certificate-authority-text=PEM"]),
        "cannot use both --kubelet-certificate-authority-text and \
         --deprecated-kubelet-completely-insecure"
    );
}

#[test]
fn only_the_first_error_is_reported() {
    // Violates the cert pair rule, the completely-insecure rule and the resolution rule:
    // metrics-server's order reports the key pair first.
    assert_eq!(
        error(&[
            "--kubelet-client-certificate=/c",
            "--deprecated-kubelet-completely-insecure",
            "--metric-resolution=1s",
        ]),
        "need both --kubelet-client-key and --kubelet-client-certificate"
    );
    // Kubelet rules come before the resolution rules.
    assert_eq!(
        error(&["--kubelet-request-timeout=0s", "--metric-resolution=1s"]),
        "kubelet-request-timeout should be positive"
    );
}

#[test]
fn serving_cert_and_key_go_together() {
    assert_eq!(
        error(&["--tls-cert-file=/c"]),
        "need both --tls-cert-file and --tls-private-key-file"
    );
    assert_eq!(
        error(&["--tls-private-key-file=/k"]),
        "need both --tls-cert-file and --tls-private-key-file"
    );
}

#[test]
fn our_bounds_must_be_positive() {
    assert_eq!(
        error(&["--scrape-max-in-flight=0"]),
        "--scrape-max-in-flight must be positive"
    );
    assert_eq!(
        error(&["--kubelet-max-body-bytes=0"]),
        "--kubelet-max-body-bytes must be positive"
    );
}

#[test]
fn bad_node_selector_is_refused() {
    let msg = error(&["--node-selector=a in (b"]);
    assert!(msg.starts_with("invalid --node-selector: "), "{msg}");
}

#[test]
fn scrape_and_store_settings_follow_flags() {
    let c = parse(&[
        "--metric-resolution=15s",
        "--kubelet-request-timeout=5s",
        "--scrape-max-in-flight=7",
        "--kubelet-port=10255",
        "--kubelet-use-node-status-port",
        "--kubelet-source=summary",
    ]);
    let settings = c.settings().unwrap();
    let s = &settings.scrape;
    assert_eq!(s.resolution, Duration::from_secs(15));
    assert_eq!(s.request_timeout, Duration::from_secs(5));
    assert_eq!(s.max_in_flight, 7);
    assert_eq!(s.kubelet_port, 10255);
    assert!(s.use_node_status_port);
    assert_eq!(s.source, scraper::kubelet::Source::Summary);
    let st = settings.store;
    assert_eq!(st.resolution, Duration::from_secs(15));
    assert_eq!(st.staleness, Duration::from_secs(30));
}

#[test]
fn help_groups_in_metrics_server_order() {
    use clap::CommandFactory;
    let help = Flags::command().render_help().to_string();
    let headings = [
        "Metrics server flags:",
        "Generic flags:",
        "Kubelet client flags:",
        "Apiserver secure serving flags:",
        "Apiserver authentication flags:",
        "Apiserver authorization flags:",
        "Apiserver audit log flags:",
        "Features flags:",
        "Logging flags:",
    ];
    let positions: Vec<usize> = headings
        .iter()
        .map(|h| {
            help.find(h)
                .unwrap_or_else(|| panic!("{h} missing in\n{help}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{help}");
    // A flag sits under its own heading.
    let kubelet = positions[2];
    let serving = positions[3];
    let at = help.find("--kubelet-insecure-tls").unwrap();
    assert!(kubelet < at && at < serving);
    assert!(help.contains("[default: 1m0s]"));
}

#[test]
fn delegated_auth_settings_follow_flags() {
    let c = parse(&[]);
    let authn = c.settings().unwrap().authn;
    assert_eq!(authn.client_ca_file, None);
    assert_eq!(authn.requestheader_client_ca_file, None);
    assert!(authn.requestheader_allowed_names.is_empty());
    assert_eq!(authn.requestheader_username_headers, ["x-remote-user"]);
    assert_eq!(authn.requestheader_group_headers, ["x-remote-group"]);
    assert_eq!(
        authn.requestheader_extra_headers_prefix,
        ["x-remote-extra-"]
    );
    assert!(authn.requestheader_uid_headers.is_empty());
    assert_eq!(authn.token_webhook_cache_ttl, Duration::from_secs(10));
    assert!(!authn.skip_lookup && !authn.tolerate_lookup_failure);
    let authz = c.settings().unwrap().authz;
    assert_eq!(authz.always_allow_paths, ["/healthz", "/readyz", "/livez"]);
    assert_eq!(authz.always_allow_groups, ["system:masters"]);
    assert_eq!(authz.authorized_ttl, Duration::from_secs(10));
    assert_eq!(authz.unauthorized_ttl, Duration::from_secs(10));

    let c = parse(&[
        "--client-ca-file=/etc/ca.crt",
        "--requestheader-client-ca-file=/etc/front-proxy-ca.crt",
        "--requestheader-allowed-names=front-proxy-client,aggregator",
        "--requestheader-username-headers=X-User",
        "--requestheader-uid-headers=X-Remote-Uid",
        "--authentication-token-webhook-cache-ttl=1m",
        "--authentication-skip-lookup",
        "--authentication-tolerate-lookup-failure=true",
        "--authorization-always-allow-paths=/livez,/metrics",
        "--authorization-webhook-cache-authorized-ttl=5m",
        "--authorization-webhook-cache-unauthorized-ttl=30s",
    ]);
    let authn = c.settings().unwrap().authn;
    assert_eq!(authn.client_ca_file, Some(PathBuf::from("/etc/ca.crt")));
    assert_eq!(
        authn.requestheader_client_ca_file,
        Some(PathBuf::from("/etc/front-proxy-ca.crt"))
    );
    assert_eq!(
        authn.requestheader_allowed_names,
        ["front-proxy-client", "aggregator"]
    );
    assert_eq!(authn.requestheader_username_headers, ["X-User"]);
    assert_eq!(authn.requestheader_uid_headers, ["X-Remote-Uid"]);
    assert_eq!(authn.token_webhook_cache_ttl, Duration::from_secs(60));
    assert!(authn.skip_lookup && authn.tolerate_lookup_failure);
    let authz = c.settings().unwrap().authz;
    assert_eq!(authz.always_allow_paths, ["/livez", "/metrics"]);
    assert_eq!(authz.authorized_ttl, Duration::from_secs(300));
    assert_eq!(authz.unauthorized_ttl, Duration::from_secs(30));
}

#[test]
fn an_empty_list_flag_is_an_empty_list_not_one_empty_item() {
    // An empty always-allow entry would otherwise allow "/" to everyone.
    let c = parse(&[
        "--authorization-always-allow-paths=",
        "--requestheader-allowed-names=",
    ]);
    assert!(c.settings().unwrap().authz.always_allow_paths.is_empty());
    assert!(
        c.settings()
            .unwrap()
            .authn
            .requestheader_allowed_names
            .is_empty()
    );
}

/// Every flag metrics-server's binary accepts (its `docs/command-line-flags.txt` groups,
/// reference §1), each with a value of its type: a Deployment's arguments carry over, none
/// stops the start.
const GO_FLAGS: &[&str] = &[
    // Metrics server
    "--kubeconfig=/etc/kubeconfig",
    "--metric-resolution=15s",
    "--version=false",
    // Generic
    "--advertise-address=10.0.0.1",
    "--cors-allowed-origins=//example\\.com(:|$)",
    "--emulated-version=kube=1.33",
    "--emulation-forward-compatible=false",
    "--external-hostname=metrics.example",
    "--feature-gates=kube:APIResponseCompression=true,AuthorizeWithSelectors=false",
    "--goaway-chance=0.001",
    "--livez-grace-period=10s",
    "--max-mutating-requests-inflight=200",
    "--max-requests-inflight=400",
    "--min-compatibility-version=kube=1.32",
    "--min-request-timeout=1800",
    "--request-timeout=1m0s",
    "--runtime-config-emulation-forward-compatible=false",
    "--shutdown-delay-duration=5s",
    "--shutdown-send-retry-after=true",
    "--shutdown-watch-termination-grace-period=0s",
    "--storage-initialization-timeout=1m0s",
    "--strict-transport-security-directives=max-age=31536000,includeSubDomains,preload",
    // Kubelet client
    "--deprecated-kubelet-completely-insecure=false",
    "--kubelet-certificate-authority=/ca.crt",
    "--kubelet-client-certificate=/c.crt",
    "--kubelet-client-key=/c.key",
    "--kubelet-insecure-tls=false",
    "--kubelet-port=10250",
    "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
    "--kubelet-request-timeout=10s",
    "--kubelet-use-node-status-port",
    "--node-selector=metrics-server-skip!=true",
    // Apiserver secure serving
    "--bind-address=0.0.0.0",
    "--cert-dir=/tmp",
    "--disable-http2-serving=false",
    "--http2-max-streams-per-connection=100",
    "--permit-address-sharing=true",
    "--permit-port-sharing=false",
    "--secure-port=10250",
    "--tls-cert-file=/tls.crt",
    "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "--tls-curve-preferences=X25519,CurveP256",
    "--tls-min-version=VersionTLS12",
    "--tls-private-key-file=/tls.key",
    "--tls-sni-cert-key=/sni.crt,/sni.key:*.example.com,example.com",
    // Apiserver authentication
    "--authentication-kubeconfig=/authn",
    "--authentication-skip-lookup=false",
    "--authentication-token-webhook-cache-ttl=10s",
    "--authentication-tolerate-lookup-failure=false",
    "--client-ca-file=/client-ca.crt",
    "--requestheader-allowed-names=front-proxy-client",
    "--requestheader-client-ca-file=/front-proxy-ca.crt",
    "--requestheader-extra-headers-prefix=x-remote-extra-",
    "--requestheader-group-headers=x-remote-group",
    "--requestheader-uid-headers=x-remote-uid",
    "--requestheader-username-headers=x-remote-user",
    // Apiserver authorization
    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    "--authorization-kubeconfig=/authz",
    "--authorization-webhook-cache-authorized-ttl=10s",
    "--authorization-webhook-cache-unauthorized-ttl=10s",
    // Apiserver audit log
    "--audit-log-batch-buffer-size=10000",
    "--audit-log-batch-max-size=1",
    "--audit-log-batch-max-wait=0s",
    "--audit-log-batch-throttle-burst=0",
    "--audit-log-batch-throttle-enable=false",
    "--audit-log-batch-throttle-qps=0",
    "--audit-log-compress=false",
    "--audit-log-format=json",
    "--audit-log-maxage=366",
    "--audit-log-maxbackup=100",
    "--audit-log-maxsize=100",
    "--audit-log-mode=blocking",
    "--audit-log-path=-",
    "--audit-log-truncate-enabled=false",
    "--audit-log-truncate-max-batch-size=10485760",
    "--audit-log-truncate-max-event-size=102400",
    "--audit-log-version=audit.k8s.io/v1",
    "--audit-policy-file=/policy.yaml",
    "--audit-webhook-batch-buffer-size=10000",
    "--audit-webhook-batch-max-size=400",
    "--audit-webhook-batch-max-wait=30s",
    "--audit-webhook-batch-throttle-burst=15",
    "--audit-webhook-batch-throttle-enable=true",
    "--audit-webhook-batch-throttle-qps=10",
    "--audit-webhook-config-file=/webhook.kubeconfig",
    "--audit-webhook-initial-backoff=10s",
    "--audit-webhook-mode=batch",
    "--audit-webhook-truncate-enabled=false",
    "--audit-webhook-truncate-max-batch-size=10485760",
    "--audit-webhook-truncate-max-event-size=102400",
    "--audit-webhook-version=audit.k8s.io/v1",
    // Features
    "--contention-profiling=false",
    "--debug-socket-path=/tmp/debug.sock",
    "--enable-priority-and-fairness=true",
    "--profiling=true",
    // Logging
    "--log-flush-frequency=5s",
    "--log-json-info-buffer-size=0",
    "--log-json-split-stream=false",
    "--log-text-info-buffer-size=0",
    "--log-text-split-stream=false",
    "--logging-format=text",
    "--v=2",
    "--vmodule=",
];

#[test]
fn every_flag_of_metrics_server_is_accepted() {
    // 104 in all: besides these, --kubelet-certificate-authority-text (which excludes
    // --kubelet-certificate-authority, tested apart).
    assert_eq!(GO_FLAGS.len(), 103);
    for flag in GO_FLAGS {
        assert!(
            Flags::try_parse_from(["metrics-server", flag]).is_ok(),
            "{flag}"
        );
    }
    let flags = parse(GO_FLAGS);
    flags.validate().unwrap();
    let settings = flags.settings().unwrap();
    // The ones that do something here did it.
    assert_eq!(
        settings.serving.hsts.as_ref().unwrap(),
        "max-age=31536000; includeSubDomains; preload"
    );
    assert_eq!(settings.serving.goaway_chance, 0.001);
    assert!(settings.serving.shutdown_send_retry_after);
    assert!(!settings.listen.reuse_port);
    let tls = &settings.serving.tls;
    assert_eq!(tls.tls12_suites.as_ref().unwrap().len(), 1);
    assert_eq!(tls.groups.as_ref().unwrap().len(), 2);
    assert_eq!(
        flags.tls_policy().unwrap().1,
        ["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"],
        "left out, to be logged"
    );
    // The ones that do not are named, to be logged at start.
    assert_eq!(
        flags.without_effect(),
        [
            "advertise-address",
            "cors-allowed-origins",
            "emulated-version",
            "external-hostname",
            "feature-gates",
            "livez-grace-period",
            "min-compatibility-version",
            "debug-socket-path",
            "permit-address-sharing",
        ]
    );
    assert!(parse(&[]).without_effect().is_empty());
    // The audit log: a policy and a path.
    let audit = settings.audit.unwrap();
    assert_eq!(audit.policy_file, std::path::Path::new("/policy.yaml"));
    let log = audit.log.unwrap();
    assert_eq!(log.destination, crate::audit::Destination::Stdout);
    assert_eq!(log.mode, crate::audit::Mode::Blocking);
    assert_eq!(log.format, crate::audit::Format::Json);
    let webhook = audit.webhook.unwrap();
    assert_eq!(webhook.mode, crate::audit::Mode::Batch { buffer: 10000 });
    assert_eq!(
        (
            webhook.max_batch_size,
            webhook.max_batch_wait,
            webhook.throttle
        ),
        (400, Duration::from_secs(30), Some((10.0, 15)))
    );
    assert_eq!(webhook.initial_backoff, Duration::from_secs(10));
}

#[test]
fn audit_flags_as_audit_options_validates_and_applies_them() {
    let audit = |args: &[&str]| {
        let mut all = vec!["--audit-policy-file=/p.yaml"];
        all.extend_from_slice(args);
        parse(&all).audit()
    };
    // A policy without a backend, or a backend without a policy, records nothing, and is
    // named as changing nothing.
    assert!(
        parse(&["--audit-policy-file=/p.yaml"])
            .audit()
            .unwrap()
            .is_none()
    );
    assert_eq!(
        parse(&["--audit-log-path=/var/log/audit.log"]).without_effect(),
        ["audit-log-path"]
    );
    assert_eq!(
        parse(&["--audit-webhook-config-file=/w"]).without_effect(),
        ["audit-webhook-config-file"]
    );
    assert!(
        parse(&["--audit-policy-file=/p", "--audit-webhook-config-file=/w"])
            .without_effect()
            .is_empty()
    );
    let file = audit(&[
        "--audit-log-path=/var/log/ms/audit.log",
        "--audit-log-maxsize=0",
        "--audit-log-maxbackup=3",
        "--audit-log-maxage=7",
        "--audit-log-compress",
        "--audit-log-format=legacy",
        "--audit-log-mode=batch",
        "--audit-log-batch-buffer-size=50",
    ])
    .unwrap()
    .unwrap();
    assert!(file.webhook.is_none());
    let log = file.log.unwrap();
    assert_eq!(
        log.destination,
        crate::audit::Destination::File(
            "/var/log/ms/audit.log".into(),
            crate::audit::logfile::Rotation {
                max_bytes: 100 * 1024 * 1024,
                max_backups: 3,
                max_age: Some(Duration::from_secs(7 * 86_400)),
                compress: true,
            }
        )
    );
    assert_eq!(log.format, crate::audit::Format::Legacy);
    assert_eq!(log.mode, crate::audit::Mode::Batch { buffer: 50 });
    let unlimited = audit(&["--audit-log-path=/a.log", "--audit-log-maxage=0"])
        .unwrap()
        .unwrap();
    let crate::audit::Destination::File(_, rotation) = unlimited.log.unwrap().destination else {
        panic!("a file")
    };
    assert_eq!((rotation.max_age, rotation.max_backups), (None, 100));
    let hook = audit(&[
        "--audit-webhook-config-file=/w",
        "--audit-webhook-mode=blocking",
        "--audit-webhook-batch-throttle-enable=false",
    ])
    .unwrap()
    .unwrap();
    assert!(hook.log.is_none());
    let webhook = hook.webhook.unwrap();
    assert_eq!(webhook.kubeconfig, std::path::Path::new("/w"));
    assert_eq!(webhook.mode, crate::audit::Mode::Blocking);
    assert_eq!(webhook.throttle, None);
    for (args, words) in [
        (
            &["--audit-log-path=-", "--audit-log-maxage=-1"][..],
            "--audit-log-maxage -1 can't be a negative number",
        ),
        (
            &["--audit-log-path=-", "--audit-log-maxsize=-5"],
            "--audit-log-maxsize -5 can't be a negative number",
        ),
        (
            &[
                "--audit-log-path=-",
                "--audit-log-version=audit.k8s.io/v1beta1",
            ],
            "invalid audit log version audit.k8s.io/v1beta1, only audit.k8s.io/v1",
        ),
        (
            &[
                "--audit-log-path=-",
                "--audit-log-mode=batch",
                "--audit-log-batch-buffer-size=0",
            ],
            "invalid audit batch log buffer size 0, must be a positive number",
        ),
        (
            &[
                "--audit-webhook-config-file=/w",
                "--audit-webhook-batch-max-size=0",
            ],
            "invalid audit batch webhook max batch size 0, must be a positive number",
        ),
        (
            &[
                "--audit-webhook-config-file=/w",
                "--audit-webhook-batch-throttle-qps=0",
            ],
            "invalid audit batch webhook throttle QPS 0, must be a positive number",
        ),
        (
            &[
                "--audit-webhook-config-file=/w",
                "--audit-webhook-version=audit.k8s.io/v1alpha1",
            ],
            "invalid audit webhook version",
        ),
    ] {
        let error = audit(args).unwrap_err().to_string();
        assert!(error.contains(words), "{args:?}: {error}");
    }
    assert_eq!(
        audit(&["--audit-log-path=-", "--audit-log-mode=blocking-strict"])
            .unwrap()
            .unwrap()
            .log
            .unwrap()
            .mode,
        crate::audit::Mode::BlockingStrict
    );
}

#[test]
fn go_validation_of_the_generic_and_serving_flags() {
    let refused = |flag: &str| Flags::try_parse_from(["metrics-server", flag]).unwrap_err();
    assert!(
        refused("--goaway-chance=0.03")
            .to_string()
            .contains("greater than 0.02")
    );
    assert!(
        refused("--feature-gates=Foo")
            .to_string()
            .contains("missing bool value")
    );
    assert!(
        refused("--feature-gates=Foo=maybe")
            .to_string()
            .contains("invalid value")
    );
    assert!(
        refused("--strict-transport-security-directives=max-age=soon")
            .to_string()
            .contains("allowed values")
    );
    assert!(
        refused("--audit-log-mode=sometimes")
            .to_string()
            .contains("invalid value")
    );
    assert_eq!(
        error(&["--tls-cipher-suites=TLS_FOO"]),
        "Cipher suite TLS_FOO not supported or doesn't exist"
    );
    assert!(error(&["--tls-curve-preferences=CurveP521"]).contains("none of the curves"));
    assert_eq!(
        error(&["--tls-sni-cert-key=a.crt"]),
        "invalid argument \"a.crt\" for \"--tls-sni-cert-key\" flag: \
         expected comma separated certificate and key file paths"
    );
    for bad in ["a.crt,a.key,b.key", ",a.key", "a.crt,:x.example"] {
        assert!(
            error(&[&format!("--tls-sni-cert-key={bad}")]).contains("expected comma separated"),
            "{bad}"
        );
    }
    assert_eq!(
        parse(&[
            "--tls-sni-cert-key=a.crt,a.key",
            "--tls-sni-cert-key=b.crt,b.key:*.b.example, b.example",
        ])
        .settings()
        .unwrap()
        .listen
        .sni,
        [
            crate::config::SniCert {
                cert: "a.crt".into(),
                key: "a.key".into(),
                names: vec![],
            },
            crate::config::SniCert {
                cert: "b.crt".into(),
                key: "b.key".into(),
                names: vec!["*.b.example".into(), "b.example".into()],
            },
        ]
    );
    // Empty lists are no lists.
    let settings = parse(&[
        "--tls-cipher-suites=",
        "--strict-transport-security-directives=",
    ])
    .settings()
    .unwrap();
    assert_eq!(settings.serving.tls, tls::policy::Policy::default());
    assert!(settings.serving.hsts.is_none());
    assert!(
        parse(&["--permit-port-sharing"])
            .settings()
            .unwrap()
            .listen
            .reuse_port
    );
    // A blank --bind-address is every address, as in Go.
    assert_eq!(
        parse(&["--bind-address="]).serving.bind_address.to_string(),
        "0.0.0.0"
    );
    assert!(
        refused("--bind-address=somewhere")
            .to_string()
            .contains("invalid IP")
    );
}
