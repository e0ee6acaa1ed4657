//! The rules both event loops follow around a connection: timers, the
//! accept pause, `--limit-rate`, the access-log line, a small file's bytes
//! put in its head, and what a file that changes under a response costs.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spindle_core::Session;

use super::WorkerContext;
use crate::config::Config;

/// How often connection timers are checked.
pub const TICK: Duration = Duration::from_millis(250);
/// How long a closing connection keeps reading (and discarding) what the
/// peer still sends, so that the kernel does not answer it with a RST that
/// could destroy the response before the peer has read it.
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// The most a lingering close reads before giving up.
pub const LINGER_MAX_BYTES: usize = 256 * 1024;
/// Pause before accepting again after EMFILE/ENFILE, so a full descriptor
/// table cannot make the loop spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// A worker's pause of accepts after the process ran out of descriptors or
/// memory and no cached descriptor could be given back: accepts wait
/// [`ACCEPT_BACKOFF`], the pause is counted in the metrics once and logged
/// once, with what to do about it.
#[derive(Default)]
pub struct AcceptBackoff {
    resume: Option<Instant>,
    warned: bool,
}

impl AcceptBackoff {
    /// Whether an accept that failed with `errno` calls for a pause.
    pub fn applies(errno: i32) -> bool {
        matches!(
            errno,
            libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
        )
    }

    /// Starts (or extends) the pause, after an accept failed with `errno`.
    pub fn start(&mut self, ctx: &WorkerContext, errno: i32, now: Instant) {
        if self.resume.is_none() {
            ctx.metrics.pause(crate::metrics::Pause::FdLimit);
        }
        if !self.warned {
            crate::error!(
                "worker {}: accept: {}; pausing accepts for {:?} (raise the fd limit with ulimit -n, or lower --max-connections)",
                ctx.id,
                std::io::Error::from_raw_os_error(errno),
                ACCEPT_BACKOFF
            );
            self.warned = true;
        }
        self.resume = Some(now + ACCEPT_BACKOFF);
    }

    pub fn paused(&self) -> bool {
        self.resume.is_some()
    }

    /// Ends the pause once its time has come: `true` when it just ended.
    pub fn expire(&mut self, now: Instant) -> bool {
        if self.resume.is_some_and(|t| now >= t) {
            *self = Self::default();
            return true;
        }
        false
    }
}

/// The shortest time from a connection deadline's setting to the deadline:
/// every backend sets a deadline to its loop's time plus one of these, so a
/// timeout sweep may skip ticks until the earliest deadline it saw, or this
/// long after it, whichever comes first (`next_scan` in the backends).
pub fn min_timeout(cfg: &Config) -> Duration {
    cfg.keepalive_timeout
        .min(cfg.header_timeout)
        .min(cfg.send_timeout)
        .min(LINGER_TIMEOUT)
}

/// The wall clock in Unix seconds, for access-log lines.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Logs a disk read of a response's body that failed (EIO from a bad
/// sector, say): `answered` when nothing of the response had been sent
/// and a 500 (or 503) went in its place; otherwise the connection was
/// dropped. One line per failure, as nginx logs each failed `pread`.
pub fn read_failed(errno: i32, answered: bool) {
    let e = std::io::Error::from_raw_os_error(errno);
    if answered {
        crate::error!("reading a file failed: {e}; answered 500 in its place");
    } else {
        crate::error!("reading a file failed: {e}; closing the connection (its head was sent)");
    }
}

/// Logs a file that ended before the length promised in the head (the
/// connection is then dropped: nothing correct can follow).
pub fn truncated() {
    crate::warn!("a file was truncated while being sent; closing the connection");
}

/// Whether a body's last bytes may go to the socket: no version is left
/// to check (the response names none, or the file was found to have it
/// before), or the file has `unchecked` now ([`crate::fs::has_version`],
/// one `fstat`; then it is taken, so a response checks once). Each
/// backend calls it where its last bytes leave, and decides what a
/// change costs the response.
pub fn version_holds(file: RawFd, unchecked: &mut Option<spindle_core::response::Version>) -> bool {
    let Some(version) = *unchecked else {
        return true;
    };
    if !crate::fs::has_version(file, &version) {
        return false;
    }
    *unchecked = None;
    true
}

/// Logs a file whose size or modification time changed while its body
/// was being sent: the last bytes are withheld and the connection dropped,
/// so the client sees a short body instead of a mix of two versions.
pub fn changed() {
    crate::warn!("a file changed while being sent; closing the connection before its last bytes");
}

/// Moves the body of a response into its head buffer when the file's
/// whole contents are cached in memory (see `filecache`): the response
/// then goes out as one send, with no file read. Returns whether it did.
pub fn inline_body(resp: &mut spindle_core::Response, body: &[u8]) -> bool {
    let Some((off, len)) = resp.file else {
        return false;
    };
    let range =
        |off: u64, len: u64| body.get(off as usize..(off as usize).saturating_add(len as usize));
    let fits = range(off, len).is_some()
        && resp
            .parts
            .iter()
            .all(|p| p.file.is_none_or(|(o, n)| range(o, n).is_some()));
    if !fits {
        debug_assert!(false, "range beyond the cached body");
        return false;
    }
    resp.front
        .extend_from_slice(range(off, len).expect("checked"));
    // A multipart body: every part's bytes and range, in order.
    for p in std::mem::take(&mut resp.parts) {
        resp.front.extend_from_slice(&p.prefix);
        if let Some((o, n)) = p.file {
            resp.front.extend_from_slice(range(o, n).expect("checked"));
        }
    }
    resp.file = None;
    resp.version = None;
    true
}

/// A connection accepted on a PROXY listener: its session, when its peer
/// is a trusted proxy (`--proxy-from`; one `getpeername`, whose answer
/// the session keeps, so the log needs no second one, which would fail
/// once the proxy has gone). Others are to be closed at once,
/// unanswered; the first refusal is said on stderr, so a wrong
/// `--proxy-from` shows, and a flood of strangers does not fill the log.
pub fn proxied_session(cfg: &Config, fd: RawFd) -> Option<Session> {
    static SAID: AtomicBool = AtomicBool::new(false);
    let peer = crate::net::peer_addr(fd);
    match peer {
        Some(p) if cfg.proxy_from.iter().any(|c| c.contains(p.ip())) => {
            return Some(Session::behind_proxy(p))
        }
        _ => {}
    }
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::warn!(
            "refused a connection from {} on a PROXY listener: not in proxy-from (said once)",
            peer.map_or_else(|| "-".to_string(), |a| a.ip().to_string())
        );
    }
    None
}

/// The session of a plain connection, and its count under
/// `--max-connections-per-ip` (a connection past the limit gets a session
/// that answers its first request 503 and closes).
pub fn plain_session(ctx: &WorkerContext, fd: RawFd) -> (Session, Option<crate::perip::IpSlot>) {
    match &ctx.per_ip {
        None => (Session::new(), None),
        Some(t) => match t.admit(fd) {
            crate::perip::Admitted::Yes(slot) => (Session::new(), slot),
            crate::perip::Admitted::OverLimit => (Session::over_limit(), None),
        },
    }
}

/// The client's address for the access log: behind a proxy, the one its
/// header named (or the proxy's); otherwise the connection's peer.
pub fn client_string(session: &Session, fd: RawFd) -> String {
    match session.client() {
        Some(a) => a.ip().to_string(),
        None => crate::net::peer_string(fd),
    }
}

/// The access-log line of a finished response, in `--log-format`'s format.
/// `since`: how long ago its request was parsed; `outcome`: where its
/// body came from, `cache`: the edge's cache status (see
/// `spindle_core::accesslog::Timing`).
pub fn log_line(
    cfg: &Config,
    client: &str,
    session: &Session,
    bytes: u64,
    since: Duration,
    outcome: &'static str,
    cache: Option<&'static str>,
) -> String {
    use spindle_core::accesslog::{self, LogFormat, Timing};
    let info = session.log_info();
    match cfg.log_format {
        LogFormat::Combined => accesslog::format_line(client, unix_now(), &info, bytes),
        LogFormat::Json => {
            let t = Timing {
                request_us: since.as_micros().min(u128::from(u64::MAX)) as u64,
                outcome,
                cache,
            };
            accesslog::format_json(client, unix_now(), &info, bytes, &t)
        }
    }
}

/// The largest least-burst of a throttled response (see
/// [`RateLimit::burst`]).
pub const RATE_BURST_MAX: u64 = 64 * 1024;

/// `--limit-rate` and `--limit-rate-after`: the body bytes a response may
/// have sent `elapsed` after it started, as nginx's `limit_rate` (per
/// response). A response that has used its allowance waits for the
/// worker's next tick ([`TICK`]), so it goes out in bursts of about a
/// tick's worth and averages the rate; no thread sleeps.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    pub rate: u64,
    pub after: u64,
}

impl RateLimit {
    pub fn from_config(cfg: &Config) -> Option<RateLimit> {
        (cfg.limit_rate > 0).then_some(RateLimit {
            rate: cfg.limit_rate,
            after: cfg.limit_rate_after,
        })
    }

    /// Body bytes that may go out now; 0 (wait for the next tick) when
    /// less than [`RateLimit::burst`] has been earned, so a throttled
    /// response goes out in a few bursts per second, not in a spin of
    /// tiny sends.
    pub fn allowance(&self, elapsed: Duration, sent: u64) -> u64 {
        // A tick's worth from the start (nginx gives a second's), so a body
        // of less than that is never held back.
        let earned =
            (u128::from(self.rate) * (elapsed + TICK).as_millis() / 1000).min(u128::from(u64::MAX));
        let a = self
            .after
            .saturating_add(earned as u64)
            .saturating_sub(sent);
        if a < self.burst() {
            0
        } else {
            a
        }
    }

    /// The least a throttled response sends at once: what a tick earns,
    /// at most [`RATE_BURST_MAX`].
    pub fn burst(&self) -> u64 {
        let per_tick = u128::from(self.rate) * TICK.as_millis() / 1000;
        (per_tick as u64).clamp(1, RATE_BURST_MAX)
    }
}
