//! Automatic HTTPS against Let's Encrypt's test CA, pebble (Debian's
//! `pebble`, with `pebble-challtestsrv` answering its DNS with 127.0.0.1):
//! a certificate obtained by HTTP-01 on spindle's plain listener and
//! verified by curl against pebble's root; a restart that uses the stored
//! certificate without the CA; HTTP-01 tokens never from the document
//! root; and the start-up errors. Each test starts its own pebble on free
//! ports and kills it when it ends, passing or not.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Longest wait for pebble to answer, and for a certificate to be issued.
const PEBBLE_START: Duration = Duration::from_secs(20);
const ISSUE_WAIT: Duration = Duration::from_secs(60);

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tools these tests run, or why they cannot.
fn tools() -> Result<(), String> {
    for t in ["pebble", "pebble-challtestsrv", "openssl", "curl"] {
        if !have(t) {
            return Err(format!(
                "{t} is not installed (Debian: pebble, openssl, curl)"
            ));
        }
    }
    Ok(())
}

/// A pebble and its DNS server, killed when dropped.
struct Pebble {
    _dns: Killed,
    pebble: Option<Killed>,
    dir: tempfile::TempDir,
    config: PathBuf,
    dns_port: u16,
    env: Vec<(String, String)>,
    /// The ACME directory URL.
    directory: String,
    /// Pebble's own certificate (trust it for the directory: --acme-ca).
    tls_cert: PathBuf,
    /// The root that issues (from the management port).
    root: PathBuf,
    mgmt_port: u16,
}

impl Pebble {
    /// Pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port` of 127.0.0.1; `env`: extra PEBBLE_* settings.
    fn start(http_port: u16, tls_port: u16, env: &[(&str, &str)]) -> Pebble {
        let dir = tempfile::tempdir().unwrap();
        let tls_cert = dir.path().join("pebble.pem");
        let tls_key = dir.path().join("pebble.key");
        // A self-signed server certificate for pebble's own HTTPS (not a
        // CA: rustls's verifier refuses a CA as the server's certificate).
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-days",
                "2",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-addext",
                "extendedKeyUsage=serverAuth",
                "-keyout",
            ])
            .arg(&tls_key)
            .arg("-out")
            .arg(&tls_cert)
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl req failed");
        let (acme_port, mgmt_port, dns_port) = (free_port(), free_port(), free_port());
        let config = dir.path().join("pebble.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"pebble": {{"listenAddress": "127.0.0.1:{acme_port}",
                "managementListenAddress": "127.0.0.1:{mgmt_port}",
                "certificate": "{}", "privateKey": "{}",
                "httpPort": {http_port}, "tlsPort": {tls_port},
                "ocspResponderURL": "", "externalAccountBindingRequired": false}}}}"#,
                tls_cert.display(),
                tls_key.display()
            ),
        )
        .unwrap();
        let dns = Killed(
            Command::new("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-management", &format!("127.0.0.1:{}", free_port())])
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start pebble-challtestsrv"),
        );
        let mut p = Pebble {
            _dns: dns,
            pebble: None,
            root: dir.path().join("root.pem"),
            dir,
            config,
            dns_port,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            directory: format!("https://127.0.0.1:{acme_port}/dir"),
            tls_cert,
            mgmt_port,
        };
        p.run();
        p
    }

    /// Starts pebble (again) and waits until it answers; the issuing root
    /// is fetched the first time (pebble makes a new one at each start).
    fn run(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("pebble.log")).unwrap();
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&self.config)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start pebble");
        self.pebble = Some(Killed(child));
        let deadline = Instant::now() + PEBBLE_START;
        loop {
            let got = Command::new("curl")
                .args(["-sf", "--cacert"])
                .arg(&self.tls_cert)
                .arg(format!("https://127.0.0.1:{}/roots/0", self.mgmt_port))
                .arg("-o")
                .arg(&self.root)
                .status()
                .unwrap()
                .success();
            if got {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pebble did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Where spindle keeps `file` of this CA in the state directory
    /// `state`: the subdirectory named after the directory's host and port.
    fn stored(&self, state: &Path, file: &str) -> PathBuf {
        let host = self.directory.split('/').nth(2).unwrap();
        state.join(host.replace(':', "_")).join(file)
    }

    fn stop(&mut self) {
        self.pebble = None;
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }
}

/// A pebble validating on two free ports (plain, TLS) for spindle, with
/// `env`; `None` (said) when the tools are missing.
fn pebble_or_skip(env: &[(&str, &str)]) -> Option<(Pebble, u16, u16)> {
    if let Err(why) = tools() {
        test_skip::skip_or_fail(why);
        return None;
    }
    let (http_port, tls_port) = (free_port(), free_port());
    Some((Pebble::start(http_port, tls_port, env), http_port, tls_port))
}

/// spindle's ACME options against `pebble`, for `domains`, with its
/// state in `state`; plain HTTP on `http_port`, HTTPS on `tls_port`.
fn acme_args(
    pebble: &Pebble,
    domains: &str,
    state: &Path,
    http_port: u16,
    tls_port: u16,
) -> Vec<String> {
    let mut args = ca_args(&pebble.directory, domains, state, http_port, tls_port);
    args.extend([
        "--acme-ca".to_string(),
        pebble.tls_cert.to_str().unwrap().to_string(),
        "--acme-email".to_string(),
        "ops@example.org".to_string(),
    ]);
    args
}

/// spindle's options for `domains` certified by the CA at `directory`.
fn ca_args(
    directory: &str,
    domains: &str,
    state: &Path,
    http_port: u16,
    tls_port: u16,
) -> Vec<String> {
    [
        "--workers",
        "1",
        "--listen",
        &format!("127.0.0.1:{http_port}"),
        "--tls-listen",
        &format!("127.0.0.1:{tls_port}"),
        "--acme-domain",
        domains,
        "--acme-directory",
        directory,
        "--acme-state",
        state.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start(root: &DocRoot, args: &[String], env: &[(&str, &str)]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_env("io-uring", Some(&root.dir), &args, env)
}

/// HTTP-01 before TLS-ALPN-01 (a test knob).
const HTTP01_FIRST: &[(&str, &str)] = &[("SPINDLE_ACME_CHALLENGE", "http-01")];

/// Waits for a line of spindle's log that contains `needle`.
fn wait_log(srv: &Server, needle: &str, wait: Duration) -> String {
    let deadline = Instant::now() + wait;
    loop {
        let log = srv.stderr();
        if let Some(l) = log.lines().find(|l| l.contains(needle)) {
            return l.to_string();
        }
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `curl --cacert ROOT` of `path` on `name`, resolved to 127.0.0.1:port:
/// the body, or curl's error.
fn curl_https(root: &Path, name: &str, port: u16, path: &str) -> Result<Vec<u8>, String> {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "10", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `--metrics` at `addr`, scraped.
fn scrape(addr: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The value of the one sample of family `name` in a scrape.
fn sample(text: &str, name: &str) -> i64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[test]
fn http01_certificate_then_a_restart_without_the_ca() {
    let Some((mut pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    let root = DocRoot::new(false);
    // A token file in the root is never what the CA is answered with.
    std::fs::create_dir_all(root.path(".well-known/acme-challenge")).unwrap();
    std::fs::write(root.path(".well-known/acme-challenge/planted"), "no").unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("acme");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = acme_args(
        &pebble,
        "a.acme.test,b.acme.test",
        &state_dir,
        http_port,
        tls_port,
    );
    args.extend(["--metrics".to_string(), metrics.clone()]);
    let mut srv = start(&root, &args, HTTP01_FIRST);
    wait_log(&srv, "no certificate yet", Duration::ZERO);
    let issued = wait_log(&srv, "certificate issued", ISSUE_WAIT);
    assert!(issued.contains("a.acme.test,b.acme.test"), "{issued}");
    assert!(issued.contains("(by http-01)"), "{issued}");
    let want = root.read("page.txt");
    for name in ["a.acme.test", "b.acme.test"] {
        let got = curl_https(&pebble.root, name, tls_port, "/page.txt")
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", srv.stderr()));
        assert_eq!(got, want, "{name}");
    }
    let m = scrape(&metrics);
    let expiry = sample(&m, "spindle_acme_certificate_expiry_timestamp_seconds");
    assert!(expiry > now() + 86_400, "{m}");
    assert!(
        sample(&m, "spindle_acme_next_attempt_timestamp_seconds") < expiry,
        "{m}"
    );
    assert_eq!(
        sample(&m, "spindle_acme_certificates_issued_total"),
        1,
        "{m}"
    );
    let planted = get(&srv, "/.well-known/acme-challenge/planted");
    assert_eq!(planted.status, 404, "a token from the document root");
    // The state: private files in the CA's own directory, the lock.
    let ca_dir = pebble.stored(&state_dir, "");
    for (path, want) in [
        (state_dir.clone(), 0o700),
        (ca_dir.clone(), 0o700),
        (state_dir.join("lock"), 0o600),
        (ca_dir.join("a.acme.test.crt"), 0o600),
        (ca_dir.join("a.acme.test.key"), 0o600),
        (ca_dir.join("account.key"), 0o600),
        (ca_dir.join("account.url"), 0o600),
    ] {
        let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
        assert_eq!(mode & 0o777, want, "{path:?}");
    }
    srv.terminate();
    drop(srv);

    // The CA gone, the stored certificate serves at once.
    pebble.stop();
    let srv = start(&root, &args, &[]);
    let line = wait_log(&srv, "using the stored certificate", Duration::ZERO);
    assert!(line.contains("a.acme.test"), "{line}");
    let got = curl_https(&pebble.root, "b.acme.test", tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
    assert_eq!(got, want);
    std::thread::sleep(Duration::from_secs(1));
    let log = srv.stderr();
    assert!(
        !log.contains("failed") && !log.contains("account"),
        "the CA was contacted:\n{log}"
    );
}

#[test]
fn tls_alpn01_certificate_on_the_tls_listener() {
    if let Err(why) = tools() {
        return test_skip::skip_or_fail(why);
    }
    // Pebble's HTTP-01 port is closed: only TLS-ALPN-01 can pass.
    let tls_port = free_port();
    let pebble = Pebble::start(free_port(), tls_port, &[]);
    let root = DocRoot::new(false);
    let state = tempfile::tempdir().unwrap();
    let args = acme_args(
        &pebble,
        "alpn.acme.test",
        state.path(),
        free_port(),
        tls_port,
    );
    let srv = start(&root, &args, &[]);
    let issued = wait_log(&srv, "certificate issued", ISSUE_WAIT);
    assert!(issued.contains("(by tls-alpn-01)"), "{issued}");
    let got = curl_https(&pebble.root, "alpn.acme.test", tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
    assert_eq!(got, root.read("page.txt"));
}

#[test]
fn a_name_without_its_certificate_fails_the_handshake() {
    if let Err(why) = tools() {
        return test_skip::skip_or_fail(why);
    }
    // A CA that answers nothing: the order fails and backs off.
    let (http_port, tls_port) = (free_port(), free_port());
    let state = tempfile::tempdir().unwrap();
    let root = DocRoot::new(false);
    let mut args = ca_args(
        &format!("https://127.0.0.1:{}/dir", free_port()),
        "pending.acme.test",
        state.path(),
        http_port,
        tls_port,
    );
    let metrics = format!("127.0.0.1:{}", free_port());
    args.extend(["--metrics".to_string(), metrics.clone()]);
    let srv = start(&root, &args, &[]);
    let line = wait_log(&srv, "order failed (attempt 1)", ISSUE_WAIT);
    assert!(line.contains("retrying in"), "{line}");
    let m = scrape(&metrics);
    assert!(sample(&m, "spindle_acme_failures_total") >= 1, "{m}");
    assert_eq!(
        sample(&m, "spindle_acme_certificate_expiry_timestamp_seconds"),
        0,
        "{m}"
    );
    let any_ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls/ca.pem");
    let e = curl_https(&any_ca, "pending.acme.test", tls_port, "/")
        .expect_err("a handshake without a certificate");
    assert!(e.contains("alert"), "{e}");
    // Plain HTTP serves meanwhile.
    assert_eq!(get(&srv, "/page.txt").status, 200);
}

#[test]
fn an_unwritable_state_directory_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let (http, tls) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    for state in [
        file.clone(),
        file.join("acme"),
        PathBuf::from("/proc/self/acme"),
    ] {
        startup_error(
            &[
                "--listen",
                &http,
                "--tls-listen",
                &tls,
                "--acme-domain",
                "a.acme.test",
                "--acme-state",
                state.to_str().unwrap(),
            ],
            "acme-state",
        );
    }
}

#[test]
fn acme_beside_a_certificate_for_the_same_name_is_refused() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let state = tempfile::tempdir().unwrap();
    let tls = format!("127.0.0.1:{}", free_port());
    // p256.pem names localhost.
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-listen",
            &tls,
            "--tls-cert",
            data.join("p256.pem").to_str().unwrap(),
            "--tls-key",
            data.join("p256.key").to_str().unwrap(),
            "--acme-domain",
            "localhost",
            "--acme-state",
            state.path().to_str().unwrap(),
        ],
        "acme-domain localhost",
    );
    startup_error(
        &["--listen", "127.0.0.1:0", "--acme-domain", "a.acme.test"],
        "needs tls-listen",
    );
}

/// The leaf certificate a TLS handshake for `name` gets, PEM.
fn served_leaf(name: &str, port: u16) -> String {
    served_leaf_or_none(name, port).unwrap_or_else(|| panic!("no certificate for {name}"))
}

/// [`served_leaf`], or `None` when the handshake fails.
fn served_leaf_or_none(name: &str, port: u16) -> Option<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", name])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text.find("-----END CERTIFICATE-----")? + 25;
    Some(text[begin..end].to_string())
}

/// The first certificate of a PEM file.
fn first_pem(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let end = text.find("-----END CERTIFICATE-----").unwrap() + 25;
    text[..end].to_string()
}

#[test]
fn a_renewal_swaps_in_while_a_download_on_the_old_certificate_finishes() {
    let Some((pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    let root = DocRoot::new(true);
    let state = tempfile::tempdir().unwrap();
    let name = "renew.acme.test";
    let args = acme_args(&pebble, name, state.path(), http_port, tls_port);
    // Renewed 6 s after notBefore: after the download below has started.
    let srv = start(&root, &args, &[("SPINDLE_ACME_RENEW_AFTER_SECS", "6")]);
    wait_log(&srv, "certificate issued", ISSUE_WAIT);
    let crt = pebble.stored(state.path(), &format!("{name}.crt"));
    let old = first_pem(&crt);
    assert_eq!(served_leaf(name, tls_port), old);
    // 64 MiB at 8 MiB/s: about 8 s on the first certificate.
    let out = state.path().join("big.out");
    let mut dl = Killed(
        Command::new("curl")
            .args(["-sS", "--fail", "--limit-rate", "8M", "--cacert"])
            .arg(&pebble.root)
            .args(["--resolve", &format!("{name}:{tls_port}:127.0.0.1")])
            .arg(format!("https://{name}:{tls_port}/big"))
            .arg("-o")
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    let renewed = wait_log(&srv, "certificate renewed", ISSUE_WAIT);
    assert!(renewed.contains(name), "{renewed}");
    assert!(
        dl.0.try_wait().unwrap().is_none(),
        "the download ended before the renewal; the test proves nothing"
    );
    let new = first_pem(&crt);
    assert_ne!(new, old, "the renewal wrote a new certificate");
    assert_eq!(served_leaf(name, tls_port), new, "new connections get it");
    let st = dl.0.wait().unwrap();
    assert!(st.success(), "the download on the old certificate failed");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), BIG_SIZE);
    assert_eq!(std::fs::read(&out).unwrap(), root.read("big"));
}

#[test]
fn the_ca_down_at_first_then_up_the_order_completes_after_backoff() {
    let Some((mut pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    pebble.stop();
    let root = DocRoot::new(false);
    let state = tempfile::tempdir().unwrap();
    let args = acme_args(
        &pebble,
        "later.acme.test",
        state.path(),
        http_port,
        tls_port,
    );
    let srv = start(&root, &args, &[("SPINDLE_ACME_BACKOFF_MS", "500")]);
    wait_log(&srv, "order failed (attempt 2)", ISSUE_WAIT);
    assert_eq!(get(&srv, "/page.txt").status, 200, "plain HTTP serves");
    pebble.run();
    let issued = wait_log(&srv, "certificate issued", ISSUE_WAIT);
    assert!(issued.contains("later.acme.test"), "{issued}");
    assert_eq!(get(&srv, "/page.txt").status, 200, "plain HTTP serves");
    curl_https(&pebble.root, "later.acme.test", tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
}

#[test]
fn half_the_nonces_refused_still_issues() {
    let Some((pebble, http_port, tls_port)) = pebble_or_skip(&[("PEBBLE_WFE_NONCEREJECT", "50")])
    else {
        return;
    };
    let root = DocRoot::new(false);
    let state = tempfile::tempdir().unwrap();
    let args = acme_args(
        &pebble,
        "nonce.acme.test",
        state.path(),
        http_port,
        tls_port,
    );
    let srv = start(&root, &args, &[]);
    wait_log(&srv, "certificate issued", ISSUE_WAIT);
    assert!(!srv.stderr().contains("failed"), "{}", srv.stderr());
    curl_https(&pebble.root, "nonce.acme.test", tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
}

#[test]
fn a_second_spindle_on_the_same_state_orders_nothing_and_takes_what_the_first_wrote() {
    let Some((pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    let root = DocRoot::new(false);
    let state = tempfile::tempdir().unwrap();
    let name = "shared.acme.test";
    // The first takes the lock at start (before its startup line), then
    // orders; the second, as a handover's successor would, finds the lock
    // taken while it has no certificate yet.
    let first = start(
        &root,
        &acme_args(&pebble, name, state.path(), http_port, tls_port),
        &[],
    );
    let second_tls = free_port();
    let args = acme_args(&pebble, name, state.path(), free_port(), second_tls);
    let second = start(&root, &args, &[]);
    wait_log(&second, "is locked by another spindle", ISSUE_WAIT);
    wait_log(&first, "certificate issued", ISSUE_WAIT);
    // Within a lock poll, the second serves what the first obtained.
    let deadline = Instant::now() + ISSUE_WAIT;
    let want = first_pem(&pebble.stored(state.path(), &format!("{name}.crt")));
    while served_leaf_or_none(name, second_tls).as_deref() != Some(&want) {
        assert!(Instant::now() < deadline, "{}", second.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !second.stderr().contains("acme: account"),
        "{}",
        second.stderr()
    );
}

#[test]
fn under_user_the_state_directory_is_the_users() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !test_skip::is_root() {
        return test_skip::skip_or_fail("not root: there is no root to drop for --user");
    }
    let Some((pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    // nobody must reach the root and the state directory's parent.
    let root = DocRoot::new(false);
    std::fs::set_permissions(&root.dir, PermissionsExt::from_mode(0o755)).unwrap();
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let state = parent.path().join("acme");
    // A state directory root made earlier, with a file in it.
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("lock"), "").unwrap();
    let name = "user.acme.test";
    let mut args = acme_args(&pebble, name, &state, http_port, tls_port);
    args.extend(["--user".to_string(), "nobody".to_string()]);
    let srv = start(&root, &args, &[]);
    wait_log(&srv, "certificate issued", ISSUE_WAIT);
    curl_https(&pebble.root, name, tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
    for path in [
        state.clone(),
        state.join("lock"),
        pebble.stored(&state, ""),
        pebble.stored(&state, "account.key"),
        pebble.stored(&state, &format!("{name}.crt")),
        pebble.stored(&state, &format!("{name}.key")),
    ] {
        let uid = std::fs::metadata(&path).unwrap().uid();
        assert_eq!(uid, 65534, "{path:?} belongs to nobody");
    }
}

#[test]
fn the_ca_restarted_mid_renewal_serving_goes_on_and_the_renewal_completes() {
    let Some((mut pebble, http_port, tls_port)) = pebble_or_skip(&[]) else {
        return;
    };
    let root = DocRoot::new(false);
    let state = tempfile::tempdir().unwrap();
    let name = "restart.acme.test";
    let args = acme_args(&pebble, name, state.path(), http_port, tls_port);
    let env = [
        ("SPINDLE_ACME_RENEW_AFTER_SECS", "4"),
        ("SPINDLE_ACME_BACKOFF_MS", "500"),
    ];
    let srv = start(&root, &args, &env);
    wait_log(&srv, "certificate issued", ISSUE_WAIT);
    pebble.stop();
    let old_root = state.path().join("old-root.pem");
    std::fs::copy(&pebble.root, &old_root).unwrap();
    wait_log(&srv, "renewal failed (attempt 1)", ISSUE_WAIT);
    // Serving goes on, on the certificate in use.
    curl_https(&old_root, name, tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
    // A new pebble: a new root, and no memory of the account.
    pebble.run();
    wait_log(&srv, "certificate renewed", ISSUE_WAIT);
    wait_log(&srv, "accountDoesNotExist", Duration::ZERO);
    curl_https(&pebble.root, name, tls_port, "/page.txt")
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.stderr()));
}
