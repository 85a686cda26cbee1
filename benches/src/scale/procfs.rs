//! What `/proc` says about a process (resident set, CPU time) and the whole machine.

use anyhow::Context as _;

/// Clock ticks per second of `/proc/*/stat` times (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t: &u64| t > 0)
        .unwrap_or(100)
}

/// A process: `self` or a pid.
#[derive(Clone, Debug)]
pub struct Proc {
    dir: String,
    ticks: u64,
}

impl Proc {
    /// This process.
    pub fn current() -> Proc {
        Proc {
            dir: "/proc/self".to_owned(),
            ticks: ticks_per_second(),
        }
    }

    /// Process `pid`.
    pub fn pid(pid: u32) -> Proc {
        Proc {
            dir: format!("/proc/{pid}"),
            ticks: ticks_per_second(),
        }
    }

    fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let path = format!("{}/status", self.dir);
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .with_context(|| format!("no {field} in {path}"))?;
        line.trim_start_matches(':')
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("parsing {field} in {path}"))
    }

    /// Resident set size (`VmRSS`), bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        Ok(self.status_kib("VmRSS")? * 1024)
    }

    /// Peak resident set size (`VmHWM`), bytes.
    pub fn peak_rss_bytes(&self) -> anyhow::Result<u64> {
        Ok(self.status_kib("VmHWM")? * 1024)
    }

    /// User plus system CPU time of every thread so far, seconds (`utime + stime`).
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let path = format!("{}/stat", self.dir);
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .with_context(|| format!("malformed {path}"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| -> anyhow::Result<u64> {
            fields
                .get(i)
                .with_context(|| format!("short {path}"))?
                .parse()
                .with_context(|| format!("parsing {path}"))
        };
        // `rest` starts at field 3 (state): utime is index 14 - 3 = 11.
        let ticks = field(11)? + field(12)?;
        Ok(ticks as f64 / self.ticks as f64)
    }
}

/// The whole machine's CPU time from `/proc/stat`: (busy, total) in ticks.
pub fn machine_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok((total.saturating_sub(idle), total))
}

/// The machine's busy share of its CPUs between two [`machine_ticks`] readings.
pub fn busy_share(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1);
    if total == 0 {
        return 0.0;
    }
    after.0.saturating_sub(before.0) as f64 / total as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_grows_while_spinning_and_rss_is_plausible() {
        let me = Proc::current();
        let before = me.cpu_seconds().unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let spent = me.cpu_seconds().unwrap() - before;
        assert!(spent >= 0.1, "spent {spent} s");
        let rss = me.rss_bytes().unwrap();
        assert!(rss > 1 << 20 && rss <= me.peak_rss_bytes().unwrap());
        let (busy, total) = machine_ticks().unwrap();
        assert!(busy > 0 && busy <= total);
    }
}
