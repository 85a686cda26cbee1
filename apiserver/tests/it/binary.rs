//! The `metrics-server` binary itself: help groups, version, exit codes.

use std::process::Command;

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_metrics-server"))
}

#[test]
fn help_lists_the_groups_in_metrics_server_order() {
    let out = binary().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let mut last = 0;
    for heading in [
        "Metrics server flags:",
        "Generic flags:",
        "Kubelet client flags:",
        "Apiserver secure serving flags:",
        "Apiserver authentication flags:",
        "Apiserver authorization flags:",
        "Features flags:",
        "Logging flags:",
    ] {
        let at = help
            .find(heading)
            .unwrap_or_else(|| panic!("{heading} missing:\n{help}"));
        assert!(at > last, "{heading} out of order");
        last = at;
    }
    for flag in [
        "--metric-resolution",
        "--kubelet-preferred-address-types",
        "--secure-port",
        "--requestheader-client-ca-file",
        "--authorization-always-allow-paths",
        "--logging-format",
        "-l, --node-selector",
        "-v, --v",
    ] {
        assert!(help.contains(flag), "{flag} missing");
    }
}

#[test]
fn version_prints_a_v_tag() {
    let out = binary().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("v{}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_configuration_exits_64_with_one_line() {
    for (args, message) in [
        (
            &[
                "--kubelet-insecure-tls",
                "--kubelet-certificate-authority=/ca.crt",
            ][..],
            "Error: cannot use both --kubelet-certificate-authority and --kubelet-insecure-tls\n",
        ),
        (
            &["--metric-resolution=10s", "--kubelet-request-timeout=10s"][..],
            "Error: metric-resolution should be larger than kubelet-request-timeout\n",
        ),
        (
            &["--metric-resolution=5x"][..],
            "error: invalid value '5x' for '--metric-resolution <duration>': \
             time: unknown unit \"x\" in duration \"5x\"\n",
        ),
        (
            &["--no-such-flag"][..],
            "error: unexpected argument '--no-such-flag' found\n",
        ),
    ] {
        let out = binary().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert_eq!(String::from_utf8(out.stderr).unwrap(), message, "{args:?}");
    }
}

#[test]
fn a_missing_kubeconfig_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = binary()
        .arg(format!(
            "--kubeconfig={}",
            dir.path().join("absent").display()
        ))
        .arg(format!("--cert-dir={}", dir.path().display()))
        .arg("--secure-port=0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("unable to construct lister client config"),
        "{stderr}"
    );
}
