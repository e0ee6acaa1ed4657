//! spindle as a caching edge in front of S3 buckets on Garage (an
//! S3-compatible distributed object store): SigV4 signing, revalidation
//! by a signed HEAD, a wrong secret refused without leaking it, and three
//! replicated nodes of which one is stopped mid-download.

mod common;

use std::path::Path;
use std::process::Command;

use common::edge::*;
use common::*;

/// Garage (`cargo install garage`; .ci/run builds it into
/// /var/tmp/garage): nodes on loopback, each object on every node, with
/// a bucket and a key.
struct Garage {
    children: Vec<std::process::Child>,
    dir: tempfile::TempDir,
    /// Each node's S3 port; `s3_port` is the first's.
    s3_ports: Vec<u16>,
    s3_port: u16,
    key: String,
    secret: String,
}

impl Drop for Garage {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn garage_bin() -> Option<std::path::PathBuf> {
    let installed = std::path::PathBuf::from("/var/tmp/garage/bin/garage");
    if installed.exists() {
        return Some(installed);
    }
    let on_path = Command::new("garage").arg("--version").output();
    on_path
        .is_ok_and(|o| o.status.success())
        .then(|| "garage".into())
}

impl Garage {
    fn start() -> Option<Garage> {
        Garage::cluster(1)
    }

    /// `n` nodes, in zones of their own, replication factor `n`.
    fn cluster(n: usize) -> Option<Garage> {
        let Some(bin) = garage_bin() else {
            test_skip::skip_or_fail("garage is not installed (cargo install garage)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let secret: String = random_bytes(32, u64::from(free_port()))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let (mut confs, mut rpcs, mut s3_ports, mut children) = (vec![], vec![], vec![], vec![]);
        for i in 0..n {
            let (rpc, s3_port, admin) = (free_port(), free_port(), free_port());
            let d = dir.path().join(format!("node{i}"));
            let d = d.display();
            let conf = format!(
                "metadata_dir = \"{d}/meta\"\ndata_dir = \"{d}/data\"\ndb_engine = \"sqlite\"\n\
                 replication_factor = {n}\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\nrpc_secret = \"{secret}\"\n\
                 [s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3_port}\"\n\
                 root_domain = \".s3.garage\"\n[admin]\napi_bind_addr = \"127.0.0.1:{admin}\"\n"
            );
            let conf_path = dir.path().join(format!("garage{i}.toml"));
            std::fs::write(&conf_path, conf).unwrap();
            children.push(
                Command::new(&bin)
                    .arg("-c")
                    .arg(&conf_path)
                    .arg("server")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            confs.push(conf_path);
            rpcs.push(rpc);
            s3_ports.push(s3_port);
        }
        let conf_path = confs[0].clone();
        let on = |conf: &Path, args: &[&str]| -> String {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let out = Command::new(&bin)
                    .arg("-c")
                    .arg(conf)
                    .args(args)
                    .output()
                    .unwrap();
                if out.status.success() {
                    return String::from_utf8_lossy(&out.stdout).into_owned();
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "garage {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        };
        let cli = |args: &[&str]| on(&conf_path, args);
        // The others join the first.
        for conf in &confs[1..] {
            let id = on(conf, &["node", "id", "-q"]);
            cli(&["node", "connect", id.trim()]);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            let status = cli(&["status"]);
            if rpcs
                .iter()
                .all(|r| status.contains(&format!("127.0.0.1:{r}")))
            {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "{status}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        for (i, rpc) in rpcs.iter().enumerate() {
            let id = status
                .lines()
                .find(|l| l.contains(&format!("127.0.0.1:{rpc}")))
                .and_then(|l| l.split_whitespace().next())
                .expect("node id")
                .to_string();
            let zone = format!("dc{}", i + 1);
            cli(&["layout", "assign", "-z", &zone, "-c", "1G", &id]);
        }
        cli(&["layout", "apply", "--version", "1"]);
        cli(&["bucket", "create", "edge"]);
        let k = cli(&["key", "create", "edge-key"]);
        let field = |name: &str| {
            k.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("no {name} in {k}"))
        };
        let (key, secret) = (field("Key ID:"), field("Secret key:"));
        cli(&[
            "bucket", "allow", "--read", "--write", "edge", "--key", "edge-key",
        ]);
        Some(Garage {
            children,
            dir,
            s3_port: s3_ports[0],
            s3_ports,
            key,
            secret,
        })
    }

    /// Stops node `i` (SIGKILL).
    fn stop(&mut self, i: usize) {
        let c = &mut self.children[i];
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// Puts `data` at `key` in the bucket, signed as curl signs.
    fn put(&self, key: &str, data: &[u8]) {
        let f = self.dir.path().join("upload");
        std::fs::write(&f, data).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--aws-sigv4",
                ])
                .arg("aws:amz:garage:s3")
                .arg("--user")
                .arg(format!("{}:{}", self.key, self.secret))
                .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T"])
                .arg(&f)
                .arg(format!("http://127.0.0.1:{}/edge/{key}", self.s3_port))
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout) == "200" {
                return;
            }
            // The layout takes a moment to apply.
            assert!(std::time::Instant::now() < deadline, "put {key}: {out:?}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    fn credentials(&self, secret: &str) -> std::path::PathBuf {
        let p = self.dir.path().join(format!("creds-{}", secret.len()));
        std::fs::write(
            &p,
            format!(
                "[default]\naws_access_key_id = {}\naws_secret_access_key = {secret}\n",
                self.key
            ),
        )
        .unwrap();
        p
    }
}

#[test]
fn an_s3_bucket_on_garage_is_an_origin_with_sigv4() {
    let Some(g) = Garage::start() else { return };
    let obj = random_bytes(3 * M as u64 + 99, 5);
    g.put("dir/obj%20one.bin", &obj);
    let bucket = format!("http://127.0.0.1:{}/edge", g.s3_port);
    // Unsigned, the bucket refuses: the signature is what lets us in.
    let unsigned = curl(&format!("{bucket}/dir/obj%20one.bin"), &[]);
    assert_eq!(unsigned.status, 403);
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let creds = g.credentials(&g.secret);
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = edge_args(&bucket, cache.path().to_str().unwrap());
    args.extend(["--origin-s3-region", "garage", "--origin-s3-credentials"]);
    args.push(creds.to_str().unwrap());
    args.extend(["--origin-ttl", "1", "--metrics", &metrics]);
    let srv = Server::start("io-uring", root.path(), &args);
    let got = curl(&srv.url("/dir/obj%20one.bin"), &[]);
    assert_eq!(got.status, 200, "{}", got.head);
    assert!(got.body == obj, "the body is not the object");
    // Stale: a signed HEAD with If-None-Match, a 304, nothing fetched.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(curl(&srv.url("/dir/obj%20one.bin"), &[]).body == obj);
    let m = curl(&format!("http://{metrics}/metrics"), &[]);
    let text = String::from_utf8_lossy(&m.body);
    for line in [
        "spindle_edge_lookups_total{result=\"revalidated\"} 1",
        "spindle_edge_origin_requests_total 4",
        "spindle_edge_errors_total{kind=\"origin\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    let r = curl(&srv.url("/dir/obj%20one.bin"), &["-r", "2000000-2000009"]);
    assert_eq!(r.body, obj[2_000_000..2_000_010]);
    assert_eq!(curl(&srv.url("/dir/missing"), &[]).status, 404);
    // A wrong secret: the bucket refuses, the client gets a 502, and the
    // log says why without the secret.
    let wrong = "0".repeat(g.secret.len() + 1);
    let bad = g.credentials(&wrong);
    let cache2 = tempfile::tempdir().unwrap();
    let mut args = edge_args(&bucket, cache2.path().to_str().unwrap());
    args.extend(["--origin-s3-region", "garage", "--origin-s3-credentials"]);
    args.push(bad.to_str().unwrap());
    let srv2 = Server::start("io-uring", root.path(), &args);
    assert_eq!(curl(&srv2.url("/dir/obj%20one.bin"), &[]).status, 502);
    let log = srv2.stderr();
    assert!(log.contains("origin answered 403"), "{log}");
    assert!(!log.contains(&wrong), "the secret is in the log");
}

#[test]
fn a_garage_node_stopped_mid_download_is_failed_over() {
    let Some(mut g) = Garage::cluster(3) else {
        return;
    };
    let iso = random_bytes(40 * M as u64 + 5, 13);
    g.put("iso/netinst.iso", &iso);
    let sums = random_bytes(3 * M as u64 + 1, 14);
    g.put("iso/SHA256SUMS", &sums);
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let creds = g.credentials(&g.secret);
    let origins: Vec<String> = g
        .s3_ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}/edge"))
        .collect();
    let mut args: Vec<&str> = vec!["--cache-dir", cache.path().to_str().unwrap()];
    args.extend(["--cache-size", "1G", "--origin-s3-region", "garage"]);
    args.extend(["--origin-s3-credentials", creds.to_str().unwrap()]);
    for o in &origins {
        args.extend(["--origin", o]);
    }
    let srv = Server::start("io-uring", root.path(), &args);
    // A client at 10 MB/s: the edge fetches slices, 8 ahead of it, for
    // about four seconds, from the first node while it is up.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iso");
    let mut client = Command::new("curl")
        .args(["-sS", "--max-time", "60", "--limit-rate", "10M", "-o"])
        .arg(&out)
        .arg(srv.url("/iso/netinst.iso"))
        .spawn()
        .expect("curl");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let had = std::fs::metadata(&out).map_or(0, |m| m.len());
    assert!(had > 0 && had < iso.len() as u64, "{had} bytes at the stop");
    g.stop(0);
    assert!(client.wait().unwrap().success(), "the download failed");
    assert!(std::fs::read(&out).unwrap() == iso, "not the object");
    // An object no one asked for yet: from the other two nodes alone.
    let g2 = curl(&srv.url("/iso/SHA256SUMS"), &[]);
    assert_eq!(g2.status, 200, "{}", g2.head);
    assert!(g2.body == sums, "not the object");
}
