//! The server's share of each HPA-shaped exchange as the kernel saw it (`--hpa-server-share`):
//! `perf record -e tcp:tcp_probe` over the phase, which reports every TCP segment a socket
//! receives with its ports and payload length. On loopback a segment is received while it is
//! sent, so per connection an exchange runs from the server's socket receiving the request's
//! first data to the client's socket receiving the response's last data before the next
//! request: the server's queueing, wake-up, work and writes, without the load client's own
//! delays in sending and reading (which the from-the-send latency still includes, since the
//! client shares the machine's cores). Needs `perf` and the right to trace the whole machine
//! (root, or `kernel.perf_event_paranoid` at -1 and access to tracefs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

/// A `perf record` of `tcp:tcp_probe` under way; dropped unfinished (the phase failed), the
/// recording is stopped. Its file is removed either way.
pub struct Recording {
    child: Option<Child>,
    file: PathBuf,
}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Starts recording for `duration` into a file in `dir`.
pub fn record(dir: &Path, duration: Duration) -> anyhow::Result<Recording> {
    let file = dir.join("tcp_probe.perf.data");
    let child = Command::new("perf")
        .args(["record", "-q", "-a", "-e", "tcp:tcp_probe", "-o"])
        .arg(&file)
        .args(["--", "sleep", &format!("{:.3}", duration.as_secs_f64())])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting `perf record -e tcp:tcp_probe` (--hpa-server-share needs perf)")?;
    Ok(Recording {
        child: Some(child),
        file,
    })
}

impl Recording {
    /// Waits for the recording to end and returns the latencies of the exchanges it saw
    /// with the server on `server_port`, sorted.
    pub fn finish(mut self, server_port: u16) -> anyhow::Result<Vec<Duration>> {
        let child = self
            .child
            .take()
            .context("the recording was already finished")?;
        let out = child
            .wait_with_output()
            .context("waiting for perf record")?;
        if !out.status.success() {
            bail!(
                "perf record -e tcp:tcp_probe failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let script = Command::new("perf")
            .args(["script", "-F", "time,trace", "-i"])
            .arg(&self.file)
            .stderr(Stdio::null())
            .output()
            .context("running perf script")?;
        if !script.status.success() {
            bail!("perf script failed: {}", script.status);
        }
        let mut latencies = exchanges(&String::from_utf8_lossy(&script.stdout), server_port);
        latencies.sort();
        if latencies.is_empty() {
            bail!("the tcp_probe recording holds no exchange with port {server_port}");
        }
        Ok(latencies)
    }
}

/// One received segment with data: when, and the receiving socket's local and remote ports.
#[derive(Debug, PartialEq)]
struct Segment {
    at: f64,
    local: u16,
    remote: u16,
}

/// A `perf script -F time,trace` line of `tcp:tcp_probe` (`  123.456789: family=AF_INET
/// src=127.0.0.1:443 dest=127.0.0.1:51000 mark=0 data_len=250 ...`; `src` is the receiving
/// socket's own address); `None` for anything else and for segments without data.
fn segment(line: &str) -> Option<Segment> {
    let (at, rest) = line.trim_start().split_once(": ")?;
    let at: f64 = at.parse().ok()?;
    let field = |name: &str| {
        rest.split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    let port = |addr: &str| addr.rsplit_once(':')?.1.parse::<u16>().ok();
    let data: u32 = field("data_len")?.parse().ok()?;
    (data > 0).then_some(())?;
    Some(Segment {
        at,
        local: port(field("src")?)?,
        remote: port(field("dest")?)?,
    })
}

/// The exchanges' latencies: per client port, from the server's socket receiving a request's
/// first data to the client's receiving the answer's last data before its next request. An
/// exchange cut by the recording's start or end is left out.
fn exchanges(script: &str, server_port: u16) -> Vec<Duration> {
    // Per client port: the request's first data, and the answer's last data so far.
    let mut open: std::collections::HashMap<u16, (f64, Option<f64>)> =
        std::collections::HashMap::new();
    let mut latencies = Vec::new();
    for s in script.lines().filter_map(segment) {
        if s.local == server_port {
            let client = s.remote;
            match open.get(&client) {
                // More of the same request.
                Some((_, None)) => {}
                Some(&(asked, Some(answered))) => {
                    latencies.push(Duration::from_secs_f64((answered - asked).max(0.0)));
                    open.insert(client, (s.at, None));
                }
                None => {
                    open.insert(client, (s.at, None));
                }
            }
        } else if s.remote == server_port
            && let Some((_, answered)) = open.get_mut(&s.local)
        {
            *answered = Some(s.at);
        }
    }
    latencies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: f64, src: u16, dest: u16, data: u32) -> String {
        format!(
            "{at:.6}: family=AF_INET src=127.0.0.1:{src} dest=127.0.0.1:{dest} mark=0 data_len={data} snd_nxt=0x1 snd_una=0x1 snd_cwnd=10 ssthresh=2147483647 snd_wnd=65536 srtt=100 rcv_wnd=65536 sock_cookie=1 skbaddr=0x0 skaddr=0x0"
        )
    }

    #[test]
    fn an_exchange_runs_from_the_request_to_the_answers_last_data_before_the_next_request() {
        let server = 8443;
        let script = [
            // Cut by the start: an answer's tail with no request seen.
            line(0.9, 40000, server, 16384),
            // Connection 40000: request at 1.0 in two segments, answer in two.
            line(1.0000, server, 40000, 200),
            line(1.0001, server, 40000, 100),
            line(1.0004, 40000, server, 16384),
            line(1.0007, 40000, server, 5000),
            // The client's bare acks and a kubelet connection are not exchanges.
            line(1.0008, server, 40000, 0),
            line(1.0009, 10250, 50000, 4000),
            // Connection 40001 interleaved.
            line(1.0005, server, 40001, 250),
            line(1.0015, 40001, server, 21000),
            // Next requests close both exchanges.
            line(1.0100, server, 40000, 250),
            line(1.0200, server, 40001, 250),
            // Cut by the end: a request and part of an answer.
            line(1.0300, 40000, server, 1000),
            "not a tcp_probe line".to_owned(),
        ]
        .join("\n");
        let mut got = exchanges(&script, server);
        got.sort();
        let ms: Vec<f64> = got.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        assert_eq!(ms.len(), 2, "{ms:?}");
        assert!((ms[0] - 0.7).abs() < 1e-6, "{ms:?}");
        assert!((ms[1] - 1.0).abs() < 1e-6, "{ms:?}");
    }

    #[test]
    fn a_segment_is_read_from_perf_scripts_line() {
        assert_eq!(
            segment(&format!("  {}", line(17179.920148, 38197, 56530, 249))),
            Some(Segment {
                at: 17179.920148,
                local: 38197,
                remote: 56530
            })
        );
        assert_eq!(segment(&line(1.0, 1, 2, 0)), None);
        assert_eq!(
            segment("17179.9: family=AF_INET6 src=[::1]:443 dest=[::1]:5000 data_len=9"),
            Some(Segment {
                at: 17179.9,
                local: 443,
                remote: 5000
            })
        );
    }
}
