//! Where the bytes travel: loopback, or (`--netns`) a veth pair between
//! two network namespaces the tool creates and removes itself. The sender
//! sockets live in one namespace, the receiver's listener in the other,
//! so the host's own network configuration is never touched. Only the
//! private /30 below is used, and only between the two veth ends.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context as _};

use crate::sys;

/// Address of the sender's veth end.
pub const TX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// Address of the receiver's veth end.
pub const RX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
const PREFIX: u8 = 30;
const NS_PREFIX: &str = "naio-";

/// The path between sender and receiver.
pub enum Net {
    Loopback,
    Veth(NetnsPair),
}

impl Net {
    pub fn is_netns(&self) -> bool {
        matches!(self, Net::Veth(_))
    }

    /// A listening socket on the receiver's side.
    pub fn listen(&self) -> anyhow::Result<TcpListener> {
        match self {
            Net::Loopback => TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind 127.0.0.1"),
            Net::Veth(p) => {
                let path = p.path(&p.rx);
                std::thread::scope(|s| {
                    s.spawn(|| -> anyhow::Result<TcpListener> {
                        sys::setns_net(&path)
                            .with_context(|| format!("setns into {}", path.display()))?;
                        TcpListener::bind((RX_ADDR, 0)).context("bind in the receiver namespace")
                    })
                    .join()
                    .map_err(|_| anyhow::anyhow!("netns thread panicked"))?
                })
            }
        }
    }

    /// `n` sockets connected to `addr` from the sender's side.
    pub fn connect_all(&self, addr: SocketAddr, n: usize) -> anyhow::Result<Vec<TcpStream>> {
        let connect = move || -> anyhow::Result<Vec<TcpStream>> {
            (0..n)
                .map(|_| TcpStream::connect(addr).with_context(|| format!("connect {addr}")))
                .collect()
        };
        match self {
            Net::Loopback => connect(),
            Net::Veth(p) => {
                let path = p.path(&p.tx);
                std::thread::scope(|s| {
                    s.spawn(|| -> anyhow::Result<Vec<TcpStream>> {
                        sys::setns_net(&path)
                            .with_context(|| format!("setns into {}", path.display()))?;
                        connect()
                    })
                    .join()
                    .map_err(|_| anyhow::anyhow!("netns thread panicked"))?
                })
            }
        }
    }
}

/// Two namespaces joined by a veth pair; removed on drop.
pub struct NetnsPair {
    pub tx: String,
    pub rx: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (is iproute2 installed?)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl NetnsPair {
    /// Creates `naio-PID-N-tx` and `naio-PID-N-rx` with a veth pair between
    /// them (10.213.0.1/30 on the tx end, 10.213.0.2/30 on the rx end).
    /// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2.
    pub fn create() -> anyhow::Result<NetnsPair> {
        remove_stale();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pair = NetnsPair {
            tx: format!("{NS_PREFIX}{pid}-{n}-tx"),
            rx: format!("{NS_PREFIX}{pid}-{n}-rx"),
        };
        // From here on, Drop removes whatever was made.
        ip(&["netns", "add", &pair.tx])?;
        ip(&["netns", "add", &pair.rx])?;
        let vt = format!("nv{pid}-{n}t");
        let vr = format!("nv{pid}-{n}r");
        ip(&[
            "link", "add", &vt, "netns", &pair.tx, "type", "veth", "peer", "name", &vr, "netns",
            &pair.rx,
        ])?;
        for (ns, dev, addr) in [(&pair.tx, &vt, TX_ADDR), (&pair.rx, &vr, RX_ADDR)] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/{PREFIX}"),
                "dev",
                dev,
            ])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    fn path(&self, ns: &str) -> PathBuf {
        PathBuf::from("/run/netns").join(ns)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end inside it, and with it
        // the peer.
        for ns in [&self.tx, &self.rx] {
            if self.path(ns).exists() {
                if let Err(e) = ip(&["netns", "del", ns]) {
                    eprintln!("naio: warning: could not remove namespace {ns}: {e:#}");
                }
            }
        }
    }
}

/// Removes namespaces left behind by naio processes that no longer exist
/// (killed before they could clean up).
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some((pid, side)) = rest.split_once('-') else {
            continue;
        };
        if !(side.ends_with("-tx") || side.ends_with("-rx")) || pid.parse::<u32>().is_err() {
            continue;
        }
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}
