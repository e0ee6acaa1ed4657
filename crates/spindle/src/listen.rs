//! The listening sockets, wherever they come from: bound here (`--listen`,
//! `--proxy-listen`, `--tls-listen`, `--metrics`), passed by systemd
//! (socket activation), or inherited from the spindle this one replaces
//! (a binary handover, `handover.rs`).
//!
//! An address is a [`Group`]: the `SO_REUSEPORT` sockets bound for it, one
//! per worker, or the one socket systemd passed, which every worker then
//! accepts from. The main thread keeps every group (each worker gets its
//! own duplicates), so that a handover can pass all of them on: a
//! reuseport socket left behind would take its queued connections with it
//! when it closed.
//!
//! A socket from systemd serves HTTPS when its address is a `--tls-listen`
//! address, the PROXY protocol when it is a `--proxy-listen` one, metrics
//! when it is `--metrics`, and plain HTTP otherwise; `--listen` is then
//! ignored. So a unit's `ListenStream=443` and `--tls-listen [::]:443` name
//! the same socket.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::config::Config;
use crate::net;

/// What a listener serves. The order is the order of a worker's listeners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Plain,
    Proxy,
    Tls,
    Metrics,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "http",
            Kind::Proxy => "proxy",
            Kind::Tls => "https",
            Kind::Metrics => "metrics",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Plain, Kind::Proxy, Kind::Tls, Kind::Metrics]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// The sockets of one address.
pub struct Group {
    pub kind: Kind,
    /// The address as configured (port 0 stays 0), to find the group again
    /// after a handover; None for a socket systemd passed.
    pub configured: Option<SocketAddr>,
    /// The address it is bound to.
    pub actual: SocketAddr,
    pub socks: Vec<OwnedFd>,
}

/// Every listening socket of the server.
pub struct Listeners {
    /// In [`Kind`] order.
    pub groups: Vec<Group>,
    /// Sockets from systemd (now or before a handover).
    pub from_systemd: usize,
    /// Groups inherited from the spindle this one replaced.
    pub inherited: usize,
}

impl Listeners {
    /// Finds or binds every listener `cfg` names. `inherited` are the
    /// groups a handover passed; those the configuration no longer names
    /// are closed, with a warning.
    pub fn open(
        cfg: &Config,
        workers: usize,
        mut inherited: Vec<Group>,
    ) -> Result<Listeners, String> {
        let from_parent = inherited.len();
        let mut groups = Vec::new();
        for sock in net::activated_sockets()? {
            let actual = net::local_addr(sock.as_raw_fd())
                .map_err(|e| format!("socket from systemd: {e}"))?;
            let kind = if cfg.tls_listen.contains(&actual) {
                Kind::Tls
            } else if cfg.proxy_listen.contains(&actual) {
                Kind::Proxy
            } else if cfg.metrics == Some(actual) {
                Kind::Metrics
            } else {
                Kind::Plain
            };
            groups.push(Group {
                kind,
                configured: None,
                actual,
                socks: vec![sock],
            });
        }
        // systemd's sockets, passed on by a handover.
        let (passed, rest): (Vec<Group>, Vec<Group>) =
            inherited.drain(..).partition(|g| g.configured.is_none());
        inherited = rest;
        groups.extend(passed);
        let from_systemd = groups.len();
        let systemd_has = |kind: Kind, a: &SocketAddr| {
            groups[..from_systemd]
                .iter()
                .any(|g| g.kind == kind && g.actual == *a)
        };
        let listen: &[SocketAddr] = if from_systemd > 0 { &[] } else { &cfg.listen };
        let wanted: Vec<(Kind, SocketAddr)> = listen
            .iter()
            .map(|a| (Kind::Plain, *a))
            .chain(cfg.proxy_listen.iter().map(|a| (Kind::Proxy, *a)))
            .chain(cfg.tls_listen.iter().map(|a| (Kind::Tls, *a)))
            .chain(cfg.metrics.iter().map(|a| (Kind::Metrics, *a)))
            .filter(|(k, a)| !systemd_has(*k, a))
            .collect();
        let mut bound = Vec::new();
        for (kind, addr) in wanted {
            if let Some(i) = inherited
                .iter()
                .position(|g| g.kind == kind && g.configured == Some(addr))
            {
                bound.push(inherited.swap_remove(i));
                continue;
            }
            bound.push(bind(kind, addr, workers)?);
        }
        for g in &inherited {
            crate::warn!(
                "handover: the configuration no longer has {} listener {}; closing it (connections waiting in its queue are lost)",
                g.kind.name(),
                g.actual
            );
        }
        groups.extend(bound);
        groups.sort_by_key(|g| g.kind);
        // Bound here, whoever made the socket: this process, systemd or
        // the spindle it replaces.
        for g in groups.iter().filter(|g| g.kind == Kind::Tls) {
            for s in &g.socks {
                net::set_tls_listener(s.as_raw_fd());
            }
        }
        Ok(Listeners {
            groups,
            from_systemd,
            inherited: from_parent - inherited.len(),
        })
    }

    /// Worker `w`'s listeners: plain, then PROXY (the range), then HTTPS
    /// (from the index), as [`crate::backend::WorkerContext`] wants them.
    /// A group of at least as many sockets as workers gives worker `w` the
    /// sockets `w`, `w + workers`, ...; a smaller one (systemd's single
    /// socket) gives every worker a duplicate of one.
    pub fn for_worker(
        &self,
        w: usize,
        workers: usize,
    ) -> Result<(Vec<OwnedFd>, std::ops::Range<usize>, usize), String> {
        let mut out = Vec::new();
        let mut proxy_at = None;
        let mut tls_from = None;
        for g in &self.groups {
            if g.kind == Kind::Metrics {
                continue;
            }
            if g.kind >= Kind::Proxy && proxy_at.is_none() {
                proxy_at = Some(out.len());
            }
            if g.kind >= Kind::Tls && tls_from.is_none() {
                tls_from = Some(out.len());
            }
            let n = g.socks.len();
            let mine: Vec<&OwnedFd> = if n >= workers {
                g.socks.iter().skip(w).step_by(workers).collect()
            } else {
                vec![&g.socks[w % n]]
            };
            for s in mine {
                out.push(
                    s.try_clone()
                        .map_err(|e| format!("listener {}: {e}", g.actual))?,
                );
            }
        }
        let proxy_at = proxy_at.unwrap_or(out.len());
        let tls_from = tls_from.unwrap_or(out.len());
        Ok((out, proxy_at..tls_from, tls_from))
    }

    /// The metrics listener (a duplicate), if there is one.
    pub fn metrics(&self) -> Result<Option<(std::net::TcpListener, SocketAddr)>, String> {
        match self.groups.iter().find(|g| g.kind == Kind::Metrics) {
            None => Ok(None),
            Some(g) => {
                let s = g.socks[0]
                    .try_clone()
                    .map_err(|e| format!("metrics listener: {e}"))?;
                Ok(Some((s.into(), g.actual)))
            }
        }
    }

    pub fn has(&self, kind: Kind) -> bool {
        self.groups.iter().any(|g| g.kind == kind)
    }

    /// The bound addresses of `kind`'s listeners.
    pub fn addrs(&self, kind: Kind) -> Vec<SocketAddr> {
        self.groups
            .iter()
            .filter(|g| g.kind == kind)
            .map(|g| g.actual)
            .collect()
    }

    /// Every descriptor, for a handover to pass on.
    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.groups
            .iter()
            .flat_map(|g| g.socks.iter().map(|s| s.as_raw_fd()))
            .collect()
    }
}

/// Binds `addr` for `kind`: a reuseport group of one socket per worker, or
/// one socket for metrics (served by one thread).
fn bind(kind: Kind, addr: SocketAddr, workers: usize) -> Result<Group, String> {
    let n = if kind == Kind::Metrics { 1 } else { workers };
    let (actual, socks) = net::bind_group(addr, n).map_err(|e| {
        let flag = if kind == Kind::Metrics {
            "--metrics"
        } else {
            "--listen"
        };
        let hint = match e.raw_os_error() {
            Some(libc::EADDRINUSE) => {
                format!("; is another server running there? choose another port with {flag}")
            }
            Some(libc::EACCES) => "; ports below 1024 need root or CAP_NET_BIND_SERVICE".into(),
            Some(libc::EADDRNOTAVAIL) => "; that address is not on this machine".into(),
            _ => String::new(),
        };
        let what = if kind == Kind::Metrics {
            " for metrics"
        } else {
            ""
        };
        format!("cannot listen on {addr}{what}: {e}{hint}")
    })?;
    Ok(Group {
        kind,
        configured: Some(addr),
        actual,
        socks,
    })
}
