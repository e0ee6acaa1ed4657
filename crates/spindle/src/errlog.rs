//! The error log: what the server says about itself (startup, reloads,
//! handovers, failures while serving), one line per event, with a level and
//! a timestamp, as nginx's `error_log`.
//!
//! A line is `2026-11-25T04:21:17.123Z [warn] spindle[4242]: message`:
//! UTC to the millisecond, the level, and the process id (two spindles
//! write to the same log during a binary handover). It goes to stderr, or
//! to `--error-log PATH`, which SIGUSR1 and SIGHUP reopen as they do the
//! access log. Under systemd, when stderr is the journal (`JOURNAL_STREAM`
//! names it), a line is `<4>message` instead: the journal keeps its own
//! time and process id, and reads the level from the `<N>` prefix
//! (`sd-daemon(3)`).
//!
//! Lines below `--log-level` are not written. Each line is one `write(2)`
//! of the whole line, so lines from several threads (and processes, on an
//! `O_APPEND` file) never interleave.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// How bad a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed: a request could not be served as asked, a log
    /// could not be reopened, the server could not start.
    Error = 0,
    /// Served, but not as configured: a fallback, a dropped log line, a
    /// reload that kept the running configuration.
    Warn = 1,
    /// The lifecycle: listening, reloaded, handed over, stopped.
    Info = 2,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }

    /// The syslog priority the journal reads from a `<N>` prefix.
    fn syslog(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
        }
    }

    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Error,
            1 => Level::Warn,
            _ => Level::Info,
        }
    }
}

pub fn parse_level(s: &str) -> Result<Level, String> {
    match s {
        "error" => Ok(Level::Error),
        "warn" => Ok(Level::Warn),
        "info" => Ok(Level::Info),
        _ => Err(format!("{s:?}: expected error, warn or info")),
    }
}

/// Lines at this level or worse are written.
static THRESHOLD: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Where lines go.
enum Sink {
    /// stderr, with timestamps.
    Stderr,
    /// stderr is the journal: `<N>` prefixes, no timestamp.
    Journal,
    /// `--error-log PATH`, opened for appending.
    File { path: String, file: File },
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Stderr);

/// Sets the level and the destination at start (and on SIGHUP: `path` may
/// change). A file that cannot be opened is an error, and the old
/// destination stays.
pub fn configure(level: Level, path: Option<&str>) -> Result<(), String> {
    let sink = match path {
        Some(p) => Sink::File {
            path: p.to_string(),
            file: open(p)?,
        },
        None if stderr_is_journal() => Sink::Journal,
        None => Sink::Stderr,
    };
    *SINK.lock().unwrap_or_else(|p| p.into_inner()) = sink;
    THRESHOLD.store(level as u8, Ordering::Relaxed);
    Ok(())
}

/// Opens the error log's file again at the same path (logrotate; SIGUSR1).
pub fn reopen() {
    let mut sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
    if let Sink::File { path, file } = &mut *sink {
        match open(path) {
            Ok(f) => *file = f,
            Err(e) => {
                let line =
                    format_line(Level::Error, &format!("{e}; still writing to the old file"));
                let _ = file.write_all(line.as_bytes());
            }
        }
    }
}

fn open(path: &str) -> Result<File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open error log {path}: {e}"))
}

/// True when stderr is the stream systemd named in `JOURNAL_STREAM`
/// (`device:inode`); a child with stderr redirected elsewhere keeps the
/// variable, hence the comparison. The journal's stream is a socket, which
/// `open` on `/proc/self/fd/2` refuses (`ENXIO`), so this `stat`s the link.
fn stderr_is_journal() -> bool {
    use std::os::linux::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(meta.st_dev()) && ino.parse() == Ok(meta.st_ino())
}

/// Writes one line, if `level` passes `--log-level`. Called through the
/// [`crate::error!`], [`crate::warn!`] and [`crate::info!`] macros.
pub fn write(level: Level, msg: std::fmt::Arguments<'_>) {
    if level > Level::from_u8(THRESHOLD.load(Ordering::Relaxed)) {
        return;
    }
    let msg = msg.to_string();
    let mut sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
    // Nothing useful can be done when the log is gone.
    let _ = match &mut *sink {
        Sink::Stderr => std::io::stderr()
            .lock()
            .write_all(format_line(level, &msg).as_bytes()),
        Sink::Journal => std::io::stderr()
            .lock()
            .write_all(format!("<{}>{msg}\n", level.syslog()).as_bytes()),
        Sink::File { file, .. } => file.write_all(format_line(level, &msg).as_bytes()),
    };
}

/// `2026-11-25T04:21:17.123Z [warn] spindle[4242]: msg\n`.
fn format_line(level: Level, msg: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (y, mo, d, h, mi, s) = spindle_core::accesslog::civil(now.as_secs() as i64);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z [{}] spindle[{}]: {msg}\n",
        now.subsec_millis(),
        level.name(),
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_time_level_and_pid() {
        let l = format_line(Level::Warn, "disk slow");
        let pid = std::process::id();
        assert!(
            l.ends_with(&format!(" [warn] spindle[{pid}]: disk slow\n")),
            "{l}"
        );
        // 2026-11-25T04:21:17.123Z
        let ts = l.split(' ').next().unwrap();
        assert_eq!(ts.len(), 24, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    }

    #[test]
    fn levels_order_by_severity() {
        assert!(Level::Error < Level::Warn && Level::Warn < Level::Info);
        assert_eq!(parse_level("warn"), Ok(Level::Warn));
        assert!(parse_level("debug").is_err());
    }
}
