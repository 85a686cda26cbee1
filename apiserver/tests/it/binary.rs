//! The `metrics-server` binary itself: help groups, version, exit codes.

use std::process::Command;

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_metrics-server"))
}

/// The binary serving on a free loopback port with its state in `dir`, against a
/// kube-apiserver that never answers, its stderr piped; `RUST_LOG` unset.
fn serving_in(dir: &std::path::Path) -> Command {
    let kubeconfig = dir.join("kubeconfig");
    crate::support::write_unreachable_kubeconfig(&kubeconfig);
    let mut command = binary();
    command
        .env_remove("RUST_LOG")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .args([
            "--secure-port=0",
            "--bind-address=127.0.0.1",
            "--authentication-tolerate-lookup-failure",
        ])
        .stderr(std::process::Stdio::piped());
    command
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
        "Apiserver audit log flags:",
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

/// A Deployment's arguments for metrics-server start this binary too: flags that change
/// nothing here are named in one warning, in the stream k8s.io/component-base's format
/// writes to (text: stderr; JSON: stdout; split: errors to stderr, the rest to stdout).
#[test]
fn flags_without_effect_are_named_at_start_in_the_format_s_stream() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        binary()
            .arg(format!("--kubeconfig={}", dir.path().join("absent").display()))
            .arg(format!("--cert-dir={}", dir.path().display()))
            .args([
                "--secure-port=0",
                "--audit-policy-file=/etc/audit/policy.yaml",
                "--feature-gates=AuthorizeWithSelectors=true",
                "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();

    let out = run(&[]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "the missing kubeconfig stops it"
    );
    let stderr = text(out.stderr);
    let warning = stderr
        .lines()
        .find(|l| l.contains("these flags change nothing"))
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    // klog's text: a warning's line starts with `W`.
    assert!(warning.starts_with('W'), "{warning}");
    assert!(warning.contains("audit-policy-file") && warning.contains("feature-gates"));
    assert!(
        stderr.contains("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
        "{stderr}"
    );
    assert!(text(out.stdout).is_empty());

    // JSON in klog's fields, on stdout: the warning (`v` 0) and the error (`err`, no `v`).
    let json_line = |text: &str, msg: &str| -> Option<serde_json::Value> {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["msg"].as_str().is_some_and(|m| m.contains(msg)))
    };
    let out = run(&["--logging-format=json"]);
    let stdout = text(out.stdout);
    let warning = json_line(&stdout, "these flags change nothing")
        .unwrap_or_else(|| panic!("no JSON warning on stdout: {stdout}"));
    assert_eq!(warning["v"], 0);
    assert!(
        warning["flags"]
            .as_str()
            .unwrap()
            .contains("audit-policy-file")
    );
    let stopped = json_line(&stdout, "metrics-server stopped")
        .unwrap_or_else(|| panic!("one stream: the error on stdout too: {stdout}"));
    assert!(stopped.get("v").is_none(), "{stopped}");
    assert!(
        stopped["err"]
            .as_str()
            .unwrap()
            .contains("lister client config")
    );

    let out = run(&["--logging-format=json", "--log-json-split-stream"]);
    let (stdout, stderr) = (text(out.stdout), text(out.stderr));
    assert!(
        json_line(&stdout, "these flags change nothing").is_some(),
        "{stdout}"
    );
    assert!(
        json_line(&stdout, "metrics-server stopped").is_none(),
        "{stdout}"
    );
    assert!(
        json_line(&stderr, "metrics-server stopped").is_some(),
        "{stderr}"
    );
}

/// The name and nice value of each thread of process `pid`.
#[cfg(target_os = "linux")]
fn threads(pid: u32) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.map_while(Result::ok) {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: the name may hold spaces; field 19 is the nice value.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let nice = stat[close + 1..]
            .split_whitespace()
            .nth(19 - 3)
            .and_then(|n| n.parse().ok());
        if let Some(nice) = nice {
            out.push((stat[open + 1..close].to_owned(), nice));
        }
    }
    out
}

/// Scraping runs on threads of its own that the kernel ranks below the serving threads, so a
/// scrape slice's burst of kubelet bodies does not queue API requests behind it.
#[cfg(target_os = "linux")]
#[test]
fn the_scrape_threads_run_below_the_serving_threads() {
    use std::time::{Duration, Instant};

    use apiserver::run::SCRAPE_NICE;

    let dir = tempfile::tempdir().unwrap();
    let mut child = serving_in(dir.path()).spawn().unwrap();
    let started = crate::support::serving(&mut child);
    // Each worker lowers its own priority as it starts: wait until every scrape thread has.
    let pid = child.id();
    let mut seen = threads(pid);
    let base = seen
        .iter()
        .find(|(name, _)| name == "metrics-server")
        .map_or(0, |(_, nice)| *nice);
    let lowered = (base + SCRAPE_NICE).min(19);
    let settled = |seen: &[(String, i32)]| {
        let mut scrape = seen.iter().filter(|(name, _)| name == "scrape").peekable();
        scrape.peek().is_some() && scrape.all(|(_, nice)| *nice == lowered)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while started && !settled(&seen) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        seen = threads(pid);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "the server did not start");
    let nice_of = |prefix: &str| -> Vec<i32> {
        seen.iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, nice)| *nice)
            .collect()
    };
    let (scrape, serve) = (nice_of("scrape"), nice_of("serve"));
    assert!(!scrape.is_empty(), "no scrape threads in {seen:?}");
    assert!(!serve.is_empty(), "no serving threads in {seen:?}");
    assert!(scrape.iter().all(|&n| n == lowered), "{seen:?}");
    assert!(serve.iter().all(|&n| n == base), "{seen:?}");
}

/// `PUT /debug/flags/v` (served with `--profiling`, the default) changes the log levels of
/// the running binary at once: from `-v=0` no request is logged; after `PUT 3` each is
/// (k8s.io/apiserver's `httplog` line); after `PUT 0` none again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_to_debug_flags_v_changes_the_log_verbosity_at_once() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::TokioIo;

    use crate::support::{Client, send};

    let dir = tempfile::tempdir().unwrap();
    /// Killed however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(
        serving_in(dir.path())
            .args([
                // No kube-apiserver to review requests: these paths are always allowed here.
                "--authorization-always-allow-paths=/livez/ping,/debug/flags/v",
                "-v=0",
            ])
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Every line until one containing `needle`, or what came within 20 s.
    let until = |needle: &str| -> (bool, Vec<String>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while let Ok(line) =
            lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return (true, seen);
            }
        }
        (false, seen)
    };
    let (started, seen) = until("serving securely");
    assert!(started, "the server did not start: {seen:?}");
    let addr: std::net::SocketAddr = seen
        .last()
        .and_then(|l| l.split("address=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {seen:?}"));

    let client = Client::insecure().alpn(&[b"http/1.1"]);
    let get = |path: &'static str| {
        let client = client.clone();
        async move { client.get(addr, path).await.status.as_u16() }
    };
    let put = |value: &'static str| {
        let client = client.clone();
        async move {
            let stream = client.connect(addr).await.unwrap();
            let request = http::Request::put("/debug/flags/v")
                .header(http::header::HOST, "localhost")
                .body(Full::new(Bytes::from_static(value.as_bytes())))
                .unwrap();
            let response = send(TokioIo::new(stream), false, request).await;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };

    assert_eq!(get("/livez/ping?quiet").await, 200);
    assert_eq!(
        put("3").await,
        (
            200,
            "successfully set klog.logging.verbosity to 3\n".to_owned()
        )
    );
    assert_eq!(get("/livez/ping?loud").await, 200);
    let (logged, seen) = until("URI=\"/livez/ping?loud");
    assert!(logged, "no request line at -v=3: {seen:?}");
    assert!(
        !seen.iter().any(|l| l.contains("URI=\"/livez/ping?quiet")),
        "{seen:?}"
    );

    assert_eq!(put("0").await.0, 200);
    assert_eq!(get("/livez/ping?quiet-again").await, 200);
    assert_eq!(put("3").await.0, 200);
    assert_eq!(get("/livez/ping?loud-again").await, 200);
    let (logged, seen) = until("URI=\"/livez/ping?loud-again");
    assert!(logged, "no request line after the second PUT: {seen:?}");
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("URI=\"/livez/ping?quiet-again")),
        "{seen:?}"
    );

    // Not an int32: refused, and the levels stay.
    assert_eq!(
        put("loud").await,
        (
            400,
            "failed set klog.logging.verbosity loud: strconv.ParseInt: parsing \"loud\": \
             invalid syntax\n"
                .to_owned()
        )
    );
}
