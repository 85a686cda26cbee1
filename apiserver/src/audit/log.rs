//! The audit log backend (`--audit-log-path`, `--audit-log-format`, `--audit-log-mode`): each
//! event as a JSON line or `audit.EventString`'s text, to standard output or to a rotated
//! [`LogFile`], written in the request's path (`blocking`, `blocking-strict`) or by a writer
//! thread behind a bounded queue (`batch`).

use std::io::Write as _;
use std::path::PathBuf;

use parking_lot::Mutex;

use super::event::Event;
use super::logfile::{LogFile, Rotation};
use super::{Error, Mode, OnDropped, OncePerSecond};

/// Where events go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Standard output (`--audit-log-path=-`).
    Stdout,
    /// A file, rotated.
    File(PathBuf, Rotation),
}

/// `--audit-log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON `Event` per line.
    Json,
    /// `audit.EventString`'s one-line text.
    Legacy,
}

/// The log backend's settings (`--audit-log-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    /// `--audit-log-path` and the rotation flags.
    pub destination: Destination,
    /// `--audit-log-format`.
    pub format: Format,
    /// `--audit-log-mode`.
    pub mode: Mode,
}

/// Where lines are written.
enum Writer {
    Stdout,
    File(LogFile),
}

impl Writer {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Writer::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
            Writer::File(file) => file.write_all(line),
        }
    }
}

enum Sink {
    Direct(Mutex<Writer>),
    Queue(std::sync::mpsc::SyncSender<Vec<u8>>),
}

/// The log backend, opened.
pub(super) struct LogBackend {
    sink: Sink,
    format: Format,
    /// `blocking-strict`.
    pub(super) strict: bool,
    /// Counts what could not be written.
    on_dropped: OnDropped,
    /// Why it could not, logged at most once a second (a full disk fails every request).
    report: std::sync::Arc<OncePerSecond>,
}

impl LogBackend {
    /// Opens the destination (a missing file is created, 0600) and, in `batch` mode, starts
    /// the writer thread; what cannot be written is counted by `on_dropped`.
    pub(super) fn open(config: &Log, on_dropped: OnDropped) -> Result<LogBackend, Error> {
        let writer = match &config.destination {
            Destination::Stdout => Writer::Stdout,
            Destination::File(path, rotation) => {
                Writer::File(LogFile::open(path, rotation.clone()).map_err(|source| {
                    Error::Open {
                        path: path.display().to_string(),
                        source,
                    }
                })?)
            }
        };
        let report = std::sync::Arc::new(OncePerSecond::default());
        let sink = match config.mode {
            Mode::Blocking | Mode::BlockingStrict => Sink::Direct(Mutex::new(writer)),
            Mode::Batch { buffer } => {
                let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<u8>>(buffer.max(1));
                let (on_dropped, report) = (on_dropped.clone(), report.clone());
                let mut writer = writer;
                std::thread::Builder::new()
                    .name("audit".into())
                    .spawn(move || {
                        for line in receiver {
                            if let Err(error) = writer.write(&line) {
                                on_dropped(1);
                                if report.due() {
                                    tracing::error!(%error, "unable to write audit events");
                                }
                            }
                        }
                    })
                    .map_err(Error::Thread)?;
                Sink::Queue(sender)
            }
        };
        Ok(LogBackend {
            sink,
            format: config.format,
            strict: config.mode == Mode::BlockingStrict,
            on_dropped,
            report,
        })
    }

    /// Writes (or queues) `event`'s line; false when it could not, which is counted.
    pub(super) fn write(&self, event: &Event) -> bool {
        let line = match self.format {
            Format::Json => event.json_line(),
            Format::Legacy => event.legacy_line(),
        };
        let failure = match &self.sink {
            Sink::Direct(writer) => match writer.lock().write(&line) {
                Ok(()) => return true,
                Err(error) => error.to_string(),
            },
            Sink::Queue(sender) => match sender.try_send(line) {
                Ok(()) => return true,
                Err(_) => "audit buffer queue blocked (--audit-log-batch-buffer-size)".to_owned(),
            },
        };
        (self.on_dropped)(1);
        if self.report.due() {
            tracing::error!(error = %failure, "unable to write audit events; dropping them");
        }
        false
    }
}
