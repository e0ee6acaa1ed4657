//! The access log, written by its own thread so that a worker never waits
//! for the disk. Workers hand finished lines to a bounded channel; when
//! the writer falls behind and the channel is full, lines are dropped and
//! counted rather than stalling the server, and the count is reported.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Lines that may wait for the writer thread.
pub const ACCESS_LOG_QUEUE_LINES: usize = 16_384;

/// A handle workers log through. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    dropped: Arc<AtomicU64>,
}

impl AccessLog {
    /// A log that discards everything (no `--access-log`).
    pub fn disabled() -> AccessLog {
        AccessLog {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Opens `target` (a path, or `-` for stdout) and starts the writer.
    pub fn open(target: &str) -> Result<(AccessLog, JoinHandle<()>), String> {
        let out: Box<dyn Write + Send> = if target == "-" {
            Box::new(std::io::stdout())
        } else {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(target)
                .map_err(|e| format!("cannot open access log {target}: {e}"))?;
            Box::new(f)
        };
        let (tx, rx) = mpsc::sync_channel(ACCESS_LOG_QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let d2 = dropped.clone();
        let handle = std::thread::Builder::new()
            .name("spindle-log".into())
            .spawn(move || writer(rx, out, d2))
            .map_err(|e| format!("cannot start the access log thread: {e}"))?;
        Ok((
            AccessLog {
                tx: Some(tx),
                dropped,
            },
            handle,
        ))
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
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

fn writer(rx: Receiver<String>, out: Box<dyn Write + Send>, dropped: Arc<AtomicU64>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut reported = 0;
    loop {
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
        let d = dropped.load(Ordering::Relaxed);
        if d != reported {
            crate::say!(
                "spindle: access log fell behind; {} lines dropped so far",
                d
            );
            reported = d;
        }
    }
}
