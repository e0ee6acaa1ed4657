//! What the edge's tests share: curl with its head and body, and the
//! flags that make spindle an edge.

use std::path::Path;
use std::process::Command;

use super::{nginx, Nginx, Server};

pub const M: usize = 1 << 20;

pub fn write(root: &Path, name: &str, data: &[u8]) {
    let p = root.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

pub struct Got {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Got {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

pub fn curl(url: &str, args: &[&str]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "60", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(&head).unwrap();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Got {
        status,
        head,
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

pub fn edge_args<'a>(origin: &'a str, cache: &'a str) -> Vec<&'a str> {
    vec![
        "--origin",
        origin,
        "--cache-dir",
        cache,
        "--cache-size",
        "1G",
    ]
}

/// An origin (Debian's nginx) serving `files`, and spindle on io-uring in
/// front of it with `extra` flags; `None` when nginx is missing (said).
pub struct Edge {
    pub origin_root: tempfile::TempDir,
    pub nginx: Nginx,
    _root: tempfile::TempDir,
    _cache: tempfile::TempDir,
    pub srv: Server,
}

impl Edge {
    pub fn start(files: &[(&str, &[u8])], extra: &[&str]) -> Option<Edge> {
        let origin_root = tempfile::tempdir().unwrap();
        for (name, data) in files {
            write(origin_root.path(), name, data);
        }
        let nginx = nginx(origin_root.path())?;
        let origin = format!("http://127.0.0.1:{}", nginx.port);
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let mut args = edge_args(&origin, cache.path().to_str().unwrap());
        if extra.contains(&"--cache-size") {
            // The caller's size, in place of the default's.
            let at = args.iter().position(|a| *a == "--cache-size").unwrap();
            args.drain(at..at + 2);
        }
        args.extend_from_slice(extra);
        let srv = Server::start("io-uring", root.path(), &args);
        Some(Edge {
            origin_root,
            nginx,
            _root: root,
            _cache: cache,
            srv,
        })
    }
}

/// The cache status of each of the first `n` lines of a JSON access log
/// (waiting for them), "null" where there is none.
pub fn cache_statuses(log: &Path, n: usize) -> Vec<String> {
    super::wait_log_lines(log, n)
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["cache"].as_str().unwrap_or("null").to_string()
        })
        .collect()
}
