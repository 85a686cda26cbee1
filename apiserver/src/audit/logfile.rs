//! The audit log file (`--audit-log-path`): an append-only file rotated by size, as
//! k8s.io/apiserver writes it through gopkg.in/natefinch/lumberjack.v2 (`--audit-log-maxsize`
//! is lumberjack's `MaxSize`, `--audit-log-maxbackup` its `MaxBackups`, `--audit-log-maxage`
//! its `MaxAge`, `--audit-log-compress` its `Compress`). The caller handles `-` (standard
//! output) and the unit conversions; this module only writes files.
//!
//! When a write would take the file past its size limit, the file is renamed to a backup
//! named after the time of the rotation in UTC (`audit.log` becomes
//! `audit-2026-12-06T13-04-05.123.log`, lumberjack's `backupName` with `LocalTime` unset, as
//! k8s.io/apiserver leaves it) and a fresh file takes its place. Then the backups are cleaned
//! up as lumberjack's `millRunOnce` does: the oldest beyond [`Rotation::max_backups`] and
//! those older than [`Rotation::max_age`] are removed, and the rest gzipped when
//! [`Rotation::compress`] is set. lumberjack runs that in a goroutine; here it runs in the
//! write that rotated, and a failure is logged, never returned, since the line was written.
//!
//! Backups are recognised by name alone, as lumberjack recognises them: `<stem>-`, a
//! timestamp that parses in the backup layout, then `<ext>` or `<ext>.gz`. Nothing else in
//! the directory is ever touched.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The mode of a log file k8s.io/apiserver creates (`ensureLogFile`), and of a fresh file
/// after a rotation when the old one's mode cannot be read.
const FILE_MODE: u32 = 0o600;

/// The mode of the directories k8s.io/apiserver creates for the log file (`ensureLogFile`'s
/// `os.MkdirAll(dir, 0700)`).
const DIR_MODE: u32 = 0o700;

/// What lumberjack appends to a compressed backup's name.
const COMPRESS_SUFFIX: &[u8] = b".gz";

/// What is appended to a compressed backup's name while it is being written; the name never
/// parses as a backup, so an interrupted compression leaves nothing a later cleanup touches.
const TEMP_SUFFIX: &[u8] = b".tmp";

const NANOS_PER_MILLI: i128 = 1_000_000;

/// How a [`LogFile`] rotates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before a write would take the file past this many bytes (lumberjack's MaxSize in
    /// MB; 0 there means 100 MB — the caller converts). A single write larger than this is
    /// refused.
    pub max_bytes: u64,
    /// Keep at most this many rotated files (0: keep all). A backup and its `.gz` count once.
    pub max_backups: usize,
    /// Remove rotated files older than this, judged by the timestamp in their name (None: keep
    /// all). lumberjack's MaxAge is whole days, 0 meaning keep all — the caller converts.
    pub max_age: Option<Duration>,
    /// Gzip rotated files (`<name>.gz`), as lumberjack's Compress.
    pub compress: bool,
}

/// A size-rotated, append-only log file, as lumberjack's `Logger`. Writes are not buffered:
/// each [`write_all`](LogFile::write_all) reaches the file before it returns.
#[derive(Debug)]
pub struct LogFile {
    /// The file written to.
    path: PathBuf,
    /// Its directory, where the backups are (`.` for a bare file name).
    dir: PathBuf,
    /// The file name up to its last `.`, and `-`: how every backup's name starts.
    prefix: Vec<u8>,
    /// The file name from its last `.` on (empty without one): how every backup's name ends,
    /// before a `.gz`.
    ext: Vec<u8>,
    /// How it rotates.
    rotation: Rotation,
    /// The open file; `None` after a rotation failed, until the next write opens it again.
    file: Option<File>,
    /// Its size: what was there when it was opened and everything written since.
    size: u64,
    /// The wall clock, for the backups' names and their age.
    clock: fn() -> SystemTime,
}

impl LogFile {
    /// Opens (creating the directory with mode 0700 and the file with mode 0600 if missing)
    /// `path` for appending. An existing file keeps its content and mode, and its size counts
    /// toward the limit. Backups already in the directory are cleaned up as after a rotation
    /// (lumberjack does so when it first opens the file); a failure there is only logged.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<LogFile> {
        LogFile::open_with_clock(path, rotation, wall_clock)
    }

    /// Same with a clock, for tests.
    pub fn open_with_clock(
        path: &Path,
        rotation: Rotation,
        clock: fn() -> SystemTime,
    ) -> io::Result<LogFile> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("log file path {} names no file", path.display()),
            )
        })?;
        let (stem, ext) = split_ext(name.as_bytes());
        let mut prefix = stem.to_vec();
        prefix.push(b'-');
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => {
                DirBuilder::new()
                    .recursive(true)
                    .mode(DIR_MODE)
                    .create(parent)
                    .map_err(context("creating log directory", parent))?;
                parent.to_path_buf()
            }
            _ => PathBuf::from("."),
        };
        let (file, size) = open_append(path, FILE_MODE)?;
        let log = LogFile {
            path: path.to_path_buf(),
            dir,
            prefix,
            ext: ext.to_vec(),
            rotation,
            file: Some(file),
            size,
            clock,
        };
        log.clean_up();
        Ok(log)
    }

    /// Appends `bytes` (one or more whole lines); rotates first when the file's size plus
    /// `bytes.len()` would pass `max_bytes`. A single write larger than `max_bytes` is an
    /// error (lumberjack: "write length %d exceeds maximum file size %d") and writes nothing.
    ///
    /// lumberjack's first write after opening an existing file rotates when the sum would
    /// reach the limit, not only pass it; here every write uses the same rule.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let max = self.rotation.max_bytes;
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("write length {len} exceeds maximum file size {max}"),
            ));
        }
        if self.file.is_none() {
            let (file, size) = open_append(&self.path, FILE_MODE)?;
            self.file = Some(file);
            self.size = size;
        }
        if self.size.saturating_add(len) > max {
            self.rotate()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Err(io::Error::other(format!(
                "log file {} is not open",
                self.path.display()
            )));
        };
        // As lumberjack counts what `Write` reports even when it fails, the size follows what
        // reached the file.
        let mut rest = bytes;
        while !rest.is_empty() {
            match file.write(rest) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("writing {}: wrote nothing", self.path.display()),
                    ));
                }
                Ok(n) => {
                    self.size = self
                        .size
                        .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
                    rest = rest.get(n..).unwrap_or_default();
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(context("writing", &self.path)(error)),
            }
        }
        Ok(())
    }

    /// The path written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the file, moves it to its backup name and opens a fresh one with the old one's
    /// mode (lumberjack's `openNew`), then cleans up the backups. Without a file to move (it
    /// was removed behind our back), the fresh one is simply created.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let mode = match fs::metadata(&self.path) {
            Ok(meta) => {
                let backup = self.dir.join(backup_name(
                    &self.prefix,
                    &self.ext,
                    unix_nanos((self.clock)()),
                ));
                fs::rename(&self.path, &backup).map_err(|error| {
                    io::Error::new(
                        error.kind(),
                        format!(
                            "rotating {} to {}: {error}",
                            self.path.display(),
                            backup.display()
                        ),
                    )
                })?;
                meta.permissions().mode() & 0o7777
            }
            Err(_) => FILE_MODE,
        };
        let (file, size) = open_append(&self.path, mode)?;
        self.file = Some(file);
        self.size = size;
        self.clean_up();
        Ok(())
    }

    /// [`mill`](LogFile::mill), logging a failure: the write that rotated has succeeded.
    fn clean_up(&self) {
        if let Err(error) = self.mill() {
            tracing::warn!(%error, path = %self.path.display(), "cleaning up rotated log files");
        }
    }

    /// lumberjack's `millRunOnce`: removes the backups beyond `max_backups` (newest kept) and
    /// those older than `max_age`, then compresses the rest if `compress` is set. Every step is
    /// tried; the first failure is returned.
    fn mill(&self) -> io::Result<()> {
        let rotation = &self.rotation;
        if rotation.max_backups == 0 && rotation.max_age.is_none() && !rotation.compress {
            return Ok(());
        }
        let mut backups = self.backups()?;
        let mut remove = Vec::new();
        if rotation.max_backups > 0 && rotation.max_backups < backups.len() {
            let mut preserved = HashSet::new();
            let mut remaining = Vec::with_capacity(backups.len());
            for backup in backups {
                preserved.insert(backup.uncompressed_name().to_vec());
                if preserved.len() > rotation.max_backups {
                    remove.push(backup);
                } else {
                    remaining.push(backup);
                }
            }
            backups = remaining;
        }
        if let Some(max_age) = rotation.max_age {
            // A cutoff before the clock can count keeps everything.
            if let Some(cutoff) = (self.clock)().checked_sub(max_age) {
                let cutoff = unix_nanos(cutoff);
                let (old, remaining): (Vec<_>, Vec<_>) =
                    backups.into_iter().partition(|b| b.nanos < cutoff);
                remove.extend(old);
                backups = remaining;
            }
        }
        let mut result = Ok(());
        for backup in &remove {
            let path = self.dir.join(&backup.name);
            if let Err(error) = fs::remove_file(&path) {
                result = result.and(Err(context("removing old log file", &path)(error)));
            }
        }
        if rotation.compress {
            for backup in backups.iter().filter(|b| !b.compressed) {
                let src = self.dir.join(&backup.name);
                if let Err(error) = compress(&src) {
                    result = result.and(Err(context("compressing log file", &src)(error)));
                }
            }
        }
        result
    }

    /// lumberjack's `oldLogFiles`: the directory's entries, other than directories, whose
    /// names are backups of this file, newest first.
    fn backups(&self) -> io::Result<Vec<Backup>> {
        let mut compressed_ext = self.ext.clone();
        compressed_ext.extend_from_slice(COMPRESS_SUFFIX);
        let mut backups = Vec::new();
        let entries =
            fs::read_dir(&self.dir).map_err(context("reading log directory", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(context("reading log directory", &self.dir))?;
            let file_type = entry
                .file_type()
                .map_err(context("reading log directory", &self.dir))?;
            if file_type.is_dir() {
                continue;
            }
            let name = entry.file_name();
            let bytes = name.as_bytes();
            let found = match time_from_name(bytes, &self.prefix, &self.ext) {
                Some(nanos) => Some((nanos, false)),
                None => {
                    time_from_name(bytes, &self.prefix, &compressed_ext).map(|nanos| (nanos, true))
                }
            };
            if let Some((nanos, compressed)) = found {
                backups.push(Backup {
                    name,
                    nanos,
                    compressed,
                });
            }
        }
        // Newest first; a backup and its `.gz` share a time, and the name orders them.
        backups.sort_by(|a, b| b.nanos.cmp(&a.nanos).then_with(|| a.name.cmp(&b.name)));
        Ok(backups)
    }
}

/// One backup found in the directory.
#[derive(Debug)]
struct Backup {
    /// Its file name.
    name: OsString,
    /// The time in its name, in Unix nanoseconds.
    nanos: i128,
    /// Whether the name ends in `.gz`.
    compressed: bool,
}

impl Backup {
    /// The name without its `.gz`: what a backup and its compressed copy share.
    fn uncompressed_name(&self) -> &[u8] {
        let name = self.name.as_bytes();
        if self.compressed {
            name.strip_suffix(COMPRESS_SUFFIX).unwrap_or(name)
        } else {
            name
        }
    }
}

/// The wall clock, read through the crate's one clock.
fn wall_clock() -> SystemTime {
    let nanos = scraper::clock::unix_now_ns();
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// Opens `path` for appending, creating it with `mode` if missing, and reads its size.
fn open_append(path: &Path, mode: u32) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(mode)
        .open(path)
        .map_err(context("opening log file", path))?;
    let size = file
        .metadata()
        .map_err(context("reading log file size", path))?
        .len();
    Ok((file, size))
}

/// Adds what was being done, and to what, to an error's message, keeping its kind.
fn context(doing: &'static str, path: &Path) -> impl FnOnce(io::Error) -> io::Error {
    move |error| io::Error::new(error.kind(), format!("{doing} {}: {error}", path.display()))
}

/// Gzips `src` to `<src>.gz` with `src`'s mode, written under a temporary name and renamed
/// into place, then removes `src`. lumberjack's `compressLogFile` writes the `.gz` in place
/// (and removes it on failure); the rename means a reader never sees half of one.
fn compress(src: &Path) -> io::Result<()> {
    let mut input = File::open(src)?;
    let mode = input.metadata()?.permissions().mode() & 0o7777;
    let mut dst = src.as_os_str().to_os_string();
    dst.push(OsStr::from_bytes(COMPRESS_SUFFIX));
    let mut temp = dst.clone();
    temp.push(OsStr::from_bytes(TEMP_SUFFIX));
    let (dst, temp) = (PathBuf::from(dst), PathBuf::from(temp));
    let written = (|| -> io::Result<()> {
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)?;
        // A leftover temporary file keeps its own mode through `open`.
        out.set_permissions(Permissions::from_mode(mode))?;
        let mut gz = GzEncoder::new(out, Compression::default());
        io::copy(&mut input, &mut gz)?;
        gz.finish()?.sync_all()?;
        fs::rename(&temp, &dst)
    })();
    if let Err(error) = written {
        // Best effort: the error being returned matters more than a leftover.
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    fs::remove_file(src)
}

/// Splits a file name at its last `.`, as Go's `filepath.Ext`: `(stem, ext)` with `ext`
/// starting at the `.`, or empty without one.
fn split_ext(name: &[u8]) -> (&[u8], &[u8]) {
    match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => name.split_at(dot),
        None => (name, &[]),
    }
}

/// `<prefix><timestamp><ext>`, the timestamp in lumberjack's `backupTimeFormat`
/// (`2006-01-02T15-04-05.000`) in UTC.
fn backup_name(prefix: &[u8], ext: &[u8], unix_nanos: i128) -> OsString {
    let mut name = prefix.to_vec();
    name.extend_from_slice(format_timestamp(unix_nanos).as_bytes());
    name.extend_from_slice(ext);
    OsString::from_vec(name)
}

/// lumberjack's `timeFromName`: the time in a backup's name, when it starts with `prefix`,
/// ends with `ext` and what is between parses as a timestamp.
fn time_from_name(name: &[u8], prefix: &[u8], ext: &[u8]) -> Option<i128> {
    let rest = name.strip_prefix(prefix)?;
    let timestamp = rest.strip_suffix(ext)?;
    parse_timestamp(timestamp)
}

/// Unix nanoseconds, negative before 1970.
fn unix_nanos(time: SystemTime) -> i128 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    }
}

/// Formats Unix nanoseconds in UTC as Go formats `2006-01-02T15-04-05.000`: the fraction
/// truncated to milliseconds, the year padded to four digits.
fn format_timestamp(unix_nanos: i128) -> String {
    let millis = unix_nanos.div_euclid(NANOS_PER_MILLI);
    let millis = i64::try_from(millis).unwrap_or(if millis < 0 { i64::MIN } else { i64::MAX });
    let crate::api::time::Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
        ..
    } = crate::api::time::Civil::from_unix_seconds(millis.div_euclid(1000));
    let milli = millis.rem_euclid(1000);
    let year = if year < 0 {
        format!("-{:04}", year.unsigned_abs())
    } else {
        format!("{year:04}")
    };
    format!("{year}-{month:02}-{day:02}T{hour:02}-{minute:02}-{second:02}.{milli:03}")
}

/// Parses `2006-01-02T15-04-05.000` in UTC as Go's `time.Parse` does, to Unix nanoseconds:
/// a four-digit year, two-digit month, day, minute and second, a one- or two-digit hour,
/// fields in range (the day within its month), and exactly three digits of fraction after a
/// `.` or `,`.
fn parse_timestamp(text: &[u8]) -> Option<i128> {
    let mut cursor = Cursor(text);
    let year = cursor.digits(4)?;
    cursor.literal(b'-')?;
    let month = cursor.digits(2)?;
    cursor.literal(b'-')?;
    let day = cursor.digits(2)?;
    cursor.literal(b'T')?;
    let hour = cursor.one_or_two_digits()?;
    cursor.literal(b'-')?;
    let minute = cursor.digits(2)?;
    cursor.literal(b'-')?;
    let second = cursor.digits(2)?;
    if !matches!(cursor.0.first(), Some(b'.' | b',')) {
        return None;
    }
    cursor.0 = cursor.0.get(1..)?;
    let milli = cursor.digits(3)?;
    if !cursor.0.is_empty()
        || !(1..=12).contains(&month)
        || day < 1
        || day > scraper::clock::days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = scraper::clock::days_from_civil(year, month, day);
    let millis = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli;
    Some(i128::from(millis) * NANOS_PER_MILLI)
}

/// The unparsed rest of a timestamp.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Option<i64> {
        let digits = self.0.get(..n)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.0 = self.0.get(n..)?;
        Some(
            digits
                .iter()
                .fold(0, |acc, &d| acc * 10 + i64::from(d - b'0')),
        )
    }

    /// One digit, or two when the second is one (Go's `getnum` without `fixed`).
    fn one_or_two_digits(&mut self) -> Option<i64> {
        let two = self.0.get(1).is_some_and(u8::is_ascii_digit);
        self.digits(if two { 2 } else { 1 })
    }

    /// This byte.
    fn literal(&mut self, byte: u8) -> Option<()> {
        let (&first, rest) = self.0.split_first()?;
        if first != byte {
            return None;
        }
        self.0 = rest;
        Some(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Read as _;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicU64, Ordering};

    use flate2::read::GzDecoder;

    use super::*;

    /// 2026-12-06T13:04:05.123Z.
    const START_MS: u64 = 1_796_562_245_123;
    const DAY_MS: u64 = 86_400_000;

    /// The time a test's clock holds.
    fn at(now_ms: &AtomicU64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(now_ms.load(Ordering::SeqCst))
    }

    fn rotation(max_bytes: u64) -> Rotation {
        Rotation {
            max_bytes,
            max_backups: 0,
            max_age: None,
            compress: false,
        }
    }

    /// The backup name of `audit.log` at `ms`.
    fn backup(ms: u64) -> String {
        backup_name(b"audit-", b".log", i128::from(ms) * NANOS_PER_MILLI)
            .into_string()
            .unwrap()
    }

    /// The directory's file names, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn gunzip(path: &Path) -> String {
        let mut text = String::new();
        GzDecoder::new(File::open(path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn appends_across_reopen_and_rotates_when_the_next_write_would_pass_max() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");

        let mut log = LogFile::open_with_clock(&path, rotation(20), clock).unwrap();
        assert_eq!(log.path(), path);
        log.write_all(b"line one\n").unwrap();
        drop(log);
        let mut log = LogFile::open_with_clock(&path, rotation(20), clock).unwrap();
        log.write_all(b"line two\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "line one\nline two\n");
        assert_eq!(names(dir.path()), ["audit.log"]);

        // 18 + 7 passes 20.
        log.write_all(b"line 3\n").unwrap();
        assert_eq!(
            names(dir.path()),
            ["audit-2026-12-06T13-04-05.123.log", "audit.log"]
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("audit-2026-12-06T13-04-05.123.log")).unwrap(),
            "line one\nline two\n"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "line 3\n");

        // 7 + 13 reaches 20 without passing it.
        log.write_all(b"line four 4\n\n").unwrap();
        assert_eq!(names(dir.path()).len(), 2);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "line 3\nline four 4\n\n"
        );

        // An existing file's size counts from the first write after opening.
        drop(log);
        NOW_MS.store(START_MS + 1, Ordering::SeqCst);
        let mut log = LogFile::open_with_clock(&path, rotation(20), clock).unwrap();
        log.write_all(b"5\n").unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(backup(START_MS + 1))).unwrap(),
            "line 3\nline four 4\n\n"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "5\n");
    }

    #[test]
    fn backup_names_split_at_the_last_dot() {
        assert_eq!(split_ext(b"audit.log"), (&b"audit"[..], &b".log"[..]));
        assert_eq!(
            split_ext(b"audit.json.log"),
            (&b"audit.json"[..], &b".log"[..])
        );
        assert_eq!(split_ext(b"audit"), (&b"audit"[..], &b""[..]));
        assert_eq!(split_ext(b".audit"), (&b""[..], &b".audit"[..]));

        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        for name in ["audit", "audit.json.log"] {
            let mut log =
                LogFile::open_with_clock(&dir.path().join(name), rotation(4), clock).unwrap();
            log.write_all(b"a\n").unwrap();
            log.write_all(b"b\n\n").unwrap();
        }
        assert_eq!(
            names(dir.path()),
            [
                "audit",
                "audit-2026-12-06T13-04-05.123",
                "audit.json-2026-12-06T13-04-05.123.log",
                "audit.json.log",
            ]
        );
    }

    #[test]
    fn timestamps_format_and_parse_as_go() {
        let nanos = |ms: i64| i128::from(ms) * NANOS_PER_MILLI;
        let start = i64::try_from(START_MS).unwrap();
        assert_eq!(format_timestamp(nanos(start)), "2026-12-06T13-04-05.123");
        // Truncated to the millisecond.
        assert_eq!(
            format_timestamp(nanos(start) + 999_999),
            "2026-12-06T13-04-05.123"
        );
        assert_eq!(format_timestamp(0), "1970-01-01T00-00-00.000");
        assert_eq!(format_timestamp(nanos(-1)), "1969-12-31T23-59-59.999");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(
            format_timestamp(nanos(1_709_251_199_999)),
            "2024-02-29T23-59-59.999"
        );
        for ms in [
            0,
            -1,
            start,
            1_709_251_199_999,
            951_782_400_000,   // 2000-02-29
            4_107_542_400_000, // 2100-03-01
        ] {
            let text = format_timestamp(nanos(ms));
            assert_eq!(parse_timestamp(text.as_bytes()), Some(nanos(ms)), "{text}");
        }
        // Go's "15" takes one digit; "." and "," both start the fraction.
        assert_eq!(
            parse_timestamp(b"2026-12-06T3-04-05.123"),
            parse_timestamp(b"2026-12-06T03-04-05.123")
        );
        assert_eq!(
            parse_timestamp(b"2026-12-06T13-04-05,123"),
            Some(nanos(start))
        );
        for bad in [
            &b""[..],
            b"2026-12-06T13-04-05",
            b"2026-12-06T13-04-05.12",
            b"2026-12-06T13-04-05.1234",
            b"2026-12-06T13-04-05.123Z",
            b"2026-13-06T13-04-05.123",
            b"2026-00-06T13-04-05.123",
            b"2026-02-29T13-04-05.123",
            b"2026-04-31T13-04-05.123",
            b"2026-12-00T13-04-05.123",
            b"2026-12-06T24-04-05.123",
            b"2026-12-06T13-60-05.123",
            b"2026-12-06T13-04-60.123",
            b"2026-12-06T13-4-05.123",
            b"2026-12-6T13-04-05.123",
            b"26-12-06T13-04-05.123",
            b"+026-12-06T13-04-05.123",
            b"2026-12-06 13-04-05.123",
            b"2026-12-06T13:04:05.123",
        ] {
            assert_eq!(
                parse_timestamp(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_write_larger_than_max_is_an_error_and_writes_nothing() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut log = LogFile::open_with_clock(&path, rotation(10), clock).unwrap();
        log.write_all(b"12345678\n").unwrap();

        let error = log.write_all(b"0123456789\n").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            error.to_string(),
            "write length 11 exceeds maximum file size 10"
        );
        assert_eq!(names(dir.path()), ["audit.log"]);
        assert_eq!(fs::read_to_string(&path).unwrap(), "12345678\n");

        // A write of exactly the limit is fine (after a rotation).
        log.write_all(b"123456789\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "123456789\n");
    }

    #[test]
    fn max_backups_keeps_the_newest() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let keep_two = Rotation {
            max_backups: 2,
            ..rotation(2)
        };
        let mut log = LogFile::open_with_clock(&path, keep_two.clone(), clock).unwrap();
        for i in 0..5 {
            NOW_MS.store(START_MS + i * 1000, Ordering::SeqCst);
            log.write_all(format!("{i}\n").as_bytes()).unwrap();
        }
        // Four rotations (before writing 1, 2, 3 and 4), the two newest kept.
        assert_eq!(
            names(dir.path()),
            [
                backup(START_MS + 3000),
                backup(START_MS + 4000),
                "audit.log".into()
            ]
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(backup(START_MS + 4000))).unwrap(),
            "3\n"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "4\n");
        drop(log);

        // A backup and its `.gz` (a compression cut short) count once.
        let older = [START_MS - 3000, START_MS - 2000, START_MS - 1000];
        for ms in older {
            fs::write(dir.path().join(backup(ms)), "old\n").unwrap();
        }
        fs::write(dir.path().join(backup(START_MS + 4000) + ".gz"), "").unwrap();
        fs::write(dir.path().join(backup(START_MS + 3000) + ".gz"), "").unwrap();
        let keep_three = Rotation {
            max_backups: 3,
            ..keep_two
        };
        // Opening cleans up, as lumberjack's first write does.
        let _log = LogFile::open_with_clock(&path, keep_three, clock).unwrap();
        assert_eq!(
            names(dir.path()),
            [
                backup(START_MS - 1000),
                backup(START_MS + 3000),
                backup(START_MS + 3000) + ".gz",
                backup(START_MS + 4000),
                backup(START_MS + 4000) + ".gz",
                "audit.log".into(),
            ]
        );
    }

    #[test]
    fn max_age_removes_old_backups_and_keeps_new_ones() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let week = Rotation {
            max_age: Some(Duration::from_millis(7 * DAY_MS)),
            ..rotation(2)
        };
        let ten_days = START_MS - 10 * DAY_MS;
        let just_over = START_MS - 7 * DAY_MS - 1;
        let just_under = START_MS - 7 * DAY_MS + 1;
        let yesterday = START_MS - DAY_MS;
        for ms in [ten_days, just_over, just_under, yesterday] {
            fs::write(dir.path().join(backup(ms)), "old\n").unwrap();
        }
        fs::write(dir.path().join(backup(ten_days) + ".gz"), "").unwrap();

        let mut log = LogFile::open_with_clock(&path, week, clock).unwrap();
        assert_eq!(
            names(dir.path()),
            [backup(just_under), backup(yesterday), "audit.log".into()]
        );

        // A day later, the rotation's cleanup removes what has aged past the week.
        NOW_MS.store(START_MS + DAY_MS, Ordering::SeqCst);
        log.write_all(b"1\n").unwrap();
        log.write_all(b"2\n").unwrap();
        assert_eq!(
            names(dir.path()),
            [
                backup(yesterday),
                backup(START_MS + DAY_MS),
                "audit.log".into()
            ]
        );
    }

    #[test]
    fn compress_leaves_gz_backups_holding_what_was_written() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let compress = Rotation {
            compress: true,
            ..rotation(13)
        };
        let mut log = LogFile::open_with_clock(&path, compress, clock).unwrap();
        log.write_all(b"first\n").unwrap();
        log.write_all(b"second\n").unwrap();
        log.write_all(b"third\n").unwrap();
        NOW_MS.store(START_MS + 1, Ordering::SeqCst);
        log.write_all(b"fourth\n").unwrap();
        log.write_all(b"fifth\n").unwrap();

        let first = dir.path().join(backup(START_MS) + ".gz");
        let second = dir.path().join(backup(START_MS + 1) + ".gz");
        assert_eq!(
            names(dir.path()),
            [
                backup(START_MS) + ".gz",
                backup(START_MS + 1) + ".gz",
                "audit.log".into()
            ]
        );
        assert_eq!(gunzip(&first), "first\nsecond\n");
        assert_eq!(gunzip(&second), "third\nfourth\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), "fifth\n");
        assert_eq!(mode(&first), 0o600);
        assert_eq!(mode(&second), 0o600);
    }

    #[test]
    fn files_that_only_look_like_backups_are_never_touched() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let old = START_MS - 30 * DAY_MS;
        let lookalikes = [
            format!("other-{}", &backup(old)["audit-".len()..]),
            format!("audit{}", &backup(old)["audit-".len()..]),
            backup(old).replace(".log", ".txt"),
            backup(old) + ".bak",
            backup(old) + ".gz.tmp",
            "audit-2026-02-30T13-04-05.123.log".into(),
            "audit-2026-12-06T13-04-05.log".into(),
            "audit-yesterday.log".into(),
            "audit-.log".into(),
            "audit.log.1".into(),
        ];
        for name in &lookalikes {
            fs::write(dir.path().join(name), "keep\n").unwrap();
        }
        // A directory with a backup's name is not a backup either.
        fs::create_dir(dir.path().join(backup(old))).unwrap();
        let strict = Rotation {
            max_bytes: 2,
            max_backups: 1,
            max_age: Some(Duration::from_millis(DAY_MS)),
            compress: true,
        };
        let mut log = LogFile::open_with_clock(&path, strict, clock).unwrap();
        for line in ["1\n", "2\n", "3\n"] {
            NOW_MS.fetch_add(1, Ordering::SeqCst);
            log.write_all(line.as_bytes()).unwrap();
        }

        let mut expected: Vec<String> = lookalikes.to_vec();
        expected.extend([
            backup(old),
            backup(START_MS + 3) + ".gz",
            "audit.log".into(),
        ]);
        expected.sort();
        assert_eq!(names(dir.path()), expected);
        for name in &lookalikes {
            assert_eq!(fs::read_to_string(dir.path().join(name)).unwrap(), "keep\n");
        }
        assert_eq!(
            gunzip(&dir.path().join(backup(START_MS + 3) + ".gz")),
            "2\n"
        );
    }

    #[test]
    fn a_failing_cleanup_does_not_fail_the_write() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        // A dangling symlink named as a backup cannot be opened to be compressed.
        let dangling = dir.path().join(backup(START_MS - 1));
        symlink(dir.path().join("missing"), &dangling).unwrap();
        let compress = Rotation {
            compress: true,
            ..rotation(2)
        };
        let mut log = LogFile::open_with_clock(&path, compress, clock).unwrap();
        log.write_all(b"1\n").unwrap();
        log.write_all(b"2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "2\n");
        assert_eq!(gunzip(&dir.path().join(backup(START_MS) + ".gz")), "1\n");
        assert!(fs::symlink_metadata(&dangling).is_ok());
    }

    #[test]
    fn creates_the_file_0600_and_a_missing_directory_0700() {
        static NOW_MS: AtomicU64 = AtomicU64::new(START_MS);
        fn clock() -> SystemTime {
            at(&NOW_MS)
        }
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("var").join("log");
        let path = parent.join("audit.log");
        let mut log = LogFile::open_with_clock(&path, rotation(2), clock).unwrap();
        assert_eq!(mode(&dir.path().join("var")), 0o700);
        assert_eq!(mode(&parent), 0o700);
        assert_eq!(mode(&path), 0o600);

        // The file after a rotation keeps the old one's mode, as lumberjack's `openNew`.
        log.write_all(b"1\n").unwrap();
        log.write_all(b"2\n").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&parent.join(backup(START_MS))), 0o600);
        fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        NOW_MS.fetch_add(1, Ordering::SeqCst);
        log.write_all(b"3\n").unwrap();
        assert_eq!(mode(&path), 0o640);

        // An existing file keeps its mode when opened.
        drop(log);
        let _log = LogFile::open_with_clock(&path, rotation(2), clock).unwrap();
        assert_eq!(mode(&path), 0o640);
    }
}
