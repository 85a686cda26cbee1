//! The generic reloader: change detection, bad content, logging once, the ways files are
//! replaced on a node (in place, renamed over, a projected volume's `..data` symlink swap).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;

/// A reloader of one file whose content must be a non-empty UTF-8 word; what it applied is
/// in the returned cell.
fn word_reloader(path: &Path, reloads: &Reloads) -> (Reloader, Arc<Mutex<String>>) {
    let initial = read(vec![path.to_path_buf()]).unwrap();
    let current = Arc::new(Mutex::new(
        String::from_utf8(initial.contents[0].clone()).unwrap(),
    ));
    let target = current.clone();
    let reloader = Reloader::new("test word", &initial, reloads.clone(), move |read| {
        let text = std::str::from_utf8(&read.contents[0]).map_err(|e| e.to_string())?;
        if text.trim().is_empty() {
            return Err("empty".to_owned());
        }
        *target.lock() = text.to_owned();
        Ok(())
    });
    (reloader, current)
}

#[test]
fn only_changed_content_is_applied_and_bad_content_fails_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("word");
    std::fs::write(&path, "one").unwrap();
    let (mut reloader, current) = word_reloader(&path, &Reloads::default());
    assert!(!reloader.check().unwrap(), "the initial content is in use");

    std::fs::write(&path, "two").unwrap();
    assert!(reloader.check().unwrap());
    assert_eq!(*current.lock(), "two");
    assert!(!reloader.check().unwrap());

    // Rewritten with the same bytes: nothing to do.
    std::fs::write(&path, "two").unwrap();
    assert!(!reloader.check().unwrap());

    std::fs::write(&path, "  ").unwrap();
    let err = reloader.check().unwrap_err();
    assert_eq!(err.to_string(), format!("{}: empty", path.display()));
    assert_eq!(*current.lock(), "two", "the last good one stays");
    assert!(
        !reloader.check().unwrap(),
        "the same bad content fails once"
    );

    std::fs::remove_file(&path).unwrap();
    let err = reloader.check().unwrap_err();
    assert!(matches!(err, Error::Read { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("reading {}: ", path.display()))
    );
    assert_eq!(*current.lock(), "two");

    std::fs::write(&path, "three").unwrap();
    assert!(reloader.check().unwrap());
    assert_eq!(*current.lock(), "three");
}

/// A writer into a shared buffer, for capturing log lines.
#[derive(Clone, Default)]
pub(in crate::credentials) struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    pub(in crate::credentials) fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[test]
fn each_distinct_failure_is_logged_once_with_the_path_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("word");
    std::fs::write(&path, "one").unwrap();
    let reloads = Reloads::default();
    let (mut reloader, current) = word_reloader(&path, &reloads);
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        std::fs::write(&path, "").unwrap();
        for _ in 0..3 {
            reloader.poll();
        }
        std::fs::remove_file(&path).unwrap();
        for _ in 0..3 {
            reloader.poll();
        }
        std::fs::write(&path, "two").unwrap();
        reloader.poll();
        reloader.poll();
    });
    let lines = logs.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let path = path.display().to_string();
    assert!(lines[0].contains("ERROR"), "{}", lines[0]);
    assert!(
        lines[0].contains("credential=\"test word\""),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains(&format!("path={path}")), "{}", lines[0]);
    assert!(
        lines[0].contains(&format!("error={path}: empty")),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("keeping the last good one"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("ERROR"), "{}", lines[1]);
    assert!(
        lines[1].contains(&format!("error=reading {path}: ")),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("INFO"), "{}", lines[2]);
    assert!(lines[2].contains("reloaded"), "{}", lines[2]);
    assert_eq!(*current.lock(), "two");
    assert_eq!(
        reloads.counts(),
        Counts {
            applied: 1,
            rejected: 2
        }
    );
}

/// A projected volume as the kubelet writes it: `..data` links to a timestamped directory,
/// and the file is a link through `..data`; an update writes a new directory and renames a
/// new `..data` link over the old one.
struct Projected {
    dir: PathBuf,
    version: u32,
}

impl Projected {
    fn new(dir: &Path, name: &str, content: &str) -> Self {
        let mut projected = Projected {
            dir: dir.to_path_buf(),
            version: 0,
        };
        projected.update(name, content);
        std::os::unix::fs::symlink(Path::new("..data").join(name), dir.join(name)).unwrap();
        projected
    }

    fn update(&mut self, name: &str, content: &str) {
        self.version += 1;
        let version = format!("..2025_01_01_00_00_0{}.{}", self.version, self.version);
        std::fs::create_dir(self.dir.join(&version)).unwrap();
        std::fs::write(self.dir.join(&version).join(name), content).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

#[test]
fn a_projected_volume_symlink_swap_and_a_rename_over_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut projected = Projected::new(dir.path(), "token", "one");
    let path = dir.path().join("token");
    let (mut reloader, current) = word_reloader(&path, &Reloads::default());
    projected.update("token", "two");
    assert!(reloader.check().unwrap());
    assert_eq!(*current.lock(), "two");
    projected.update("token", "three");
    assert!(reloader.check().unwrap());
    assert_eq!(*current.lock(), "three");

    let plain = dir.path().join("plain");
    std::fs::write(&plain, "one").unwrap();
    let (mut reloader, current) = word_reloader(&plain, &Reloads::default());
    let tmp = dir.path().join(".plain.tmp");
    std::fs::write(&tmp, "two").unwrap();
    std::fs::rename(&tmp, &plain).unwrap();
    assert!(reloader.check().unwrap());
    assert_eq!(*current.lock(), "two");
}

#[test]
fn files_read_together_change_together() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, "1").unwrap();
    std::fs::write(&b, "2").unwrap();
    let initial = read(vec![a.clone(), b.clone()]).unwrap();
    assert_eq!(
        initial.describe(),
        format!("{}, {}", a.display(), b.display())
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let target = seen.clone();
    let mut reloader = Reloader::new("pair", &initial, Reloads::default(), move |read| {
        target.lock().push(read.contents.clone());
        Ok(())
    });
    std::fs::write(&b, "3").unwrap();
    assert!(reloader.check().unwrap());
    // Moving a byte from one file to the other is a change too.
    std::fs::write(&a, "13").unwrap();
    std::fs::write(&b, "").unwrap();
    assert!(reloader.check().unwrap());
    assert_eq!(
        *seen.lock(),
        [
            vec![b"1".to_vec(), b"3".to_vec()],
            vec![b"13".to_vec(), Vec::new()]
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn run_polls_on_its_interval_until_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("word");
    std::fs::write(&path, "one").unwrap();
    let reloads = Reloads::default();
    let (reloader, current) = word_reloader(&path, &reloads);
    let shutdown = CancellationToken::new();
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(reloader.run(Duration::from_secs(15), shutdown.clone()));
    std::fs::write(&path, "two").unwrap();
    let counts = reloads.wait_for(|c| c.applied == 1).await;
    assert_eq!(counts.rejected, 0);
    assert_eq!(*current.lock(), "two");
    assert_eq!(started.elapsed(), Duration::from_secs(15), "one interval");
    shutdown.cancel();
    task.await.unwrap();
}
