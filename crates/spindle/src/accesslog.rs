//! The access log, written by its own thread so that a worker never waits
//! for the disk. Workers hand finished lines to a bounded channel; when
//! the writer falls behind and the channel is full, lines are dropped and
//! counted rather than stalling the server, and the count is reported.
//!
//! SIGUSR1 reopens the file (logrotate's `postrotate`, as nginx): the writer
//! flushes whole lines to the old file, then opens the path again. SIGHUP
//! does the same, at the path the reloaded configuration names.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Lines that may wait for the writer thread.
pub const ACCESS_LOG_QUEUE_LINES: usize = 16_384;

/// A handle workers log through. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    dropped: Arc<AtomicU64>,
    /// Set by [`AccessLog::reopen`]; the writer opens `target` again.
    reopen: Arc<AtomicBool>,
    /// The path (or `-`), changed by a reload.
    target: Arc<Mutex<String>>,
    /// Set by [`AccessLog::shut`]: the writer writes what is queued and
    /// ends. (Waiting for every sender to go would wait for ever: the
    /// metrics thread keeps one for the dropped-lines count.)
    shut: Arc<AtomicBool>,
}

impl AccessLog {
    /// A log that discards everything (no `--access-log`).
    pub fn disabled() -> AccessLog {
        AccessLog {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
            reopen: Arc::new(AtomicBool::new(false)),
            target: Arc::new(Mutex::new(String::new())),
            shut: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Opens `target` (a path, or `-` for stdout) and starts the writer.
    pub fn open(target: &str) -> Result<(AccessLog, JoinHandle<()>), String> {
        let out = open_target(target)?;
        let (tx, rx) = mpsc::sync_channel(ACCESS_LOG_QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let reopen = Arc::new(AtomicBool::new(false));
        let target = Arc::new(Mutex::new(target.to_string()));
        let shut = Arc::new(AtomicBool::new(false));
        let (d2, r2, t2, s2) = (
            dropped.clone(),
            reopen.clone(),
            target.clone(),
            shut.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("spindle-log".into())
            .spawn(move || writer(rx, out, d2, &r2, &t2, &s2))
            .map_err(|e| format!("cannot start the access log thread: {e}"))?;
        Ok((
            AccessLog {
                tx: Some(tx),
                dropped,
                reopen,
                target,
                shut,
            },
            handle,
        ))
    }

    /// Asks the writer to reopen the log at `target` (SIGHUP, after a
    /// reload that may have changed the path); never blocks.
    pub fn reopen_at(&self, target: &str) {
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = target.to_string();
        self.reopen();
    }

    /// Asks the writer to write the lines queued and end (at exit, once the
    /// workers are gone); the caller then joins it.
    pub fn shut(&self) {
        if let Some(tx) = &self.tx {
            self.shut.store(true, Ordering::Release);
            let _ = tx.try_send(String::new());
        }
    }

    /// Asks the writer to reopen the file (on SIGUSR1); never blocks.
    pub fn reopen(&self) {
        if let Some(tx) = &self.tx {
            self.reopen.store(true, Ordering::Release);
            // Wakes the writer; when the queue is full it is awake anyway.
            let _ = tx.try_send(String::new());
        }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Lines dropped so far because the writer fell behind (for metrics).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues one line; never blocks.
    pub fn log(&self, line: String) {
        if let Some(tx) = &self.tx {
            match tx.try_send(line) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The file (appended to, created if missing), or stdout for `-`.
fn open_target(target: &str) -> Result<Box<dyn Write + Send>, String> {
    if target == "-" {
        return Ok(Box::new(std::io::stdout()));
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(target)
        .map_err(|e| format!("cannot open access log {target}: {e}"))?;
    Ok(Box::new(f))
}

fn writer(
    rx: Receiver<String>,
    out: Box<dyn Write + Send>,
    dropped: Arc<AtomicU64>,
    reopen: &AtomicBool,
    target: &Mutex<String>,
    shut: &AtomicBool,
) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut reported = 0;
    loop {
        if reopen.swap(false, Ordering::AcqRel) {
            let target = target.lock().unwrap_or_else(|p| p.into_inner()).clone();
            // Every line so far goes whole to the old file first.
            let _ = out.flush();
            match open_target(&target) {
                Ok(f) => {
                    out = std::io::BufWriter::with_capacity(64 * 1024, f);
                    crate::info!("access log {target} reopened");
                }
                Err(e) => crate::error!("{e}; still writing to the old file"),
            }
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                let _ = out.write_all(line.as_bytes());
                // Drain what is queued before flushing.
                while let Ok(line) = rx.try_recv() {
                    let _ = out.write_all(line.as_bytes());
                }
                let _ = out.flush();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let _ = out.flush();
                break;
            }
        }
        if shut.load(Ordering::Acquire) {
            while let Ok(line) = rx.try_recv() {
                let _ = out.write_all(line.as_bytes());
            }
            let _ = out.flush();
            break;
        }
        let d = dropped.load(Ordering::Relaxed);
        if d != reported {
            crate::warn!("access log fell behind; {} lines dropped so far", d);
            reported = d;
        }
    }
}
