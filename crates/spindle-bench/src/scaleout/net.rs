//! The scale-out bench's machines: a network namespace per replica (a veth
//! pair to the host) and the blkio cgroup that counts and caps its disk reads.

use super::*;

/// Runs `ip ARGS` (iproute2); its error output on failure.
pub(crate) fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

const NS_PREFIX: &str = "spindle-so-";

/// One network namespace per replica, a veth pair from the host into each;
/// removed on drop (the veth goes with its namespace; the host end is deleted
/// first all the same).
pub(super) struct Net {
    pub(super) octet: u8,
    made: Vec<(String, String)>,
}

impl Net {
    pub(super) fn create() -> Result<Net> {
        remove_stale_namespaces();
        let pid = std::process::id();
        let mut net = Net {
            // 10.214-253.k.0/24: naio uses 10.213.0.0/30.
            octet: 214 + (pid % 40) as u8,
            made: Vec::new(),
        };
        for k in 0..REPLICAS {
            let ns = format!("{NS_PREFIX}{pid}-r{k}");
            let host = format!("sso{pid}h{k}");
            let peer = format!("sso{pid}p{k}");
            ip(&["netns", "add", &ns])?;
            net.made.push((ns.clone(), host.clone()));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &peer, "netns", &ns])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/24", net.host_addr(k)),
                "dev",
                &host,
            ])?;
            ip(&["link", "set", &host, "up"])?;
            let inside = |args: &[&str]| {
                let mut a = vec!["netns", "exec", &ns, "ip"];
                a.extend_from_slice(args);
                ip(&a)
            };
            inside(&[
                "addr",
                "add",
                &format!("{}/24", net.replica_addr(k)),
                "dev",
                &peer,
            ])?;
            inside(&["link", "set", &peer, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(net)
    }
    pub(super) fn host_addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, k as u8, 1)
    }
    pub(super) fn replica_addr(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, k as u8, 2)
    }
    pub(super) fn ns(&self, k: usize) -> &str {
        &self.made[k].0
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (ns, host) in self.made.drain(..) {
            let _ = ip(&["link", "del", &host]);
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

/// Namespaces left by a harness that was killed (its pid no longer alive).
fn remove_stale_namespaces() {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

// ---------------------------------------------------------------- blkio

/// A blkio cgroup (v1) per replica: its disk bytes read, and the optional cap.
pub(super) struct Blkio {
    dir: PathBuf,
}

impl Blkio {
    pub(super) fn create(name: &str, cap: Option<(String, u64)>) -> Result<Option<Blkio>> {
        let root = Path::new("/sys/fs/cgroup/blkio");
        if !root.join("blkio.throttle.io_service_bytes").exists() {
            if cap.is_some() {
                bail!("--disk-mbps needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio");
            }
            return Ok(None);
        }
        let dir = root.join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let b = Blkio { dir };
        if let Some((dev, bps)) = cap {
            std::fs::write(
                b.dir.join("blkio.throttle.read_bps_device"),
                format!("{dev} {bps}"),
            )
            .context("setting blkio.throttle.read_bps_device")?;
        }
        Ok(Some(b))
    }
    pub(super) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
    /// Bytes read from every disk by the cgroup's processes (and their io-wq workers).
    pub(super) fn read_bytes(&self) -> f64 {
        std::fs::read_to_string(self.dir.join("blkio.throttle.io_service_bytes"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[1] == "Read").then(|| f[2].parse::<f64>().unwrap_or(0.0))
            })
            .sum()
    }
}

impl Drop for Blkio {
    fn drop(&mut self) {
        for _ in 0..50 {
            let empty = std::fs::read_to_string(self.procs())
                .map(|s| s.trim().is_empty())
                .unwrap_or(true);
            if empty {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `major:minor` of the disk that holds `path`.
pub(super) fn dev_numbers(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .ok()
        .map(|s| s.trim().to_string())
}
