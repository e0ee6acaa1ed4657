//! Flag parsing (http_load prefixes) and bad input: one line, exit 2.

mod common;

use common::*;
use spindle_load::cli::{parse, Command, Config, End, Start};
use std::time::Duration;

fn cfg(args: &[&str]) -> Config {
    match parse(args) {
        Ok(Command::Run(c)) => *c,
        other => panic!("{args:?} gave {other:?}"),
    }
}

fn usage_err(args: &[&str]) -> String {
    match parse(args) {
        Err(e) => e.0,
        Ok(c) => panic!("{args:?} should fail, gave {c:?}"),
    }
}

#[test]
fn http_load_prefixes() {
    let c = cfg(&["-p", "100", "-f", "10000", "urls"]);
    assert_eq!(c.start, Start::Parallel(100));
    assert_eq!(c.end, End::Fetches(10000));
    assert_eq!(c.url_file.to_str(), Some("urls"));
    assert!(!c.checksum && !c.throttle && !c.verbose && !c.keepalive);
    assert_eq!(c.timeout, Duration::from_secs(60));
    assert_eq!(c.threads, 1);

    // The seed's own command line.
    let c = cfg(&["-verbose", "-parallel", "100", "-fetches", "10000", "urls"]);
    assert!(c.verbose);
    assert_eq!(c.start, Start::Parallel(100));

    // Ambiguous prefixes resolve in http_load's order.
    assert!(cfg(&["-t", "-p", "1", "-f", "1", "u"]).throttle); // not -timeout
    assert_eq!(
        cfg(&["-ti", "5", "-p", "1", "-f", "1", "u"]).timeout,
        Duration::from_secs(5)
    );
    assert_eq!(cfg(&["-p", "1", "-s", "3", "u"]).end, End::Seconds(3.0)); // not -sip
    let c = cfg(&["-si", "sips", "-p", "1", "-f", "1", "u"]);
    assert_eq!(c.sip_file.unwrap().to_str(), Some("sips"));
    let c = cfg(&["-pr", "proxy:3128", "-pa", "2", "-f", "1", "u"]);
    assert_eq!(c.proxy, Some(("proxy".to_string(), 3128)));
    assert_eq!(c.start, Start::Parallel(2));
    let c = cfg(&["-r", "50", "-j", "-fe", "7", "-c", "-v", "u"]);
    assert_eq!(
        c.start,
        Start::Rate {
            per_sec: 50.0,
            jitter: true
        }
    );
    assert_eq!(c.end, End::Fetches(7));
    assert!(c.checksum && c.verbose);
    // A proxy without a port means port 80.
    assert_eq!(
        cfg(&["-proxy", "h", "-p", "1", "-f", "1", "u"]).proxy,
        Some(("h".into(), 80))
    );
}

#[test]
fn long_options() {
    let c = cfg(&[
        "--keepalive",
        "--latency",
        "--cpu",
        "--cpu-interval=2",
        "--idle",
        "1000",
        "--json",
        "o.json",
        "--threads=2",
        "-v",
        "--interval",
        "10",
        "--no-progress",
        "-p",
        "4",
        "-s",
        "30",
        "u",
    ]);
    assert!(c.keepalive && c.latency && c.cpu && c.no_progress_bar);
    assert_eq!(c.cpu_interval, Duration::from_secs(2));
    assert_eq!(c.idle, 1000);
    assert_eq!(c.json.unwrap().to_str(), Some("o.json"));
    assert_eq!(c.threads, 2);
    assert_eq!(c.progress_interval, Duration::from_secs(10));
    let c = cfg(&["-r", "10", "--max-in-flight", "5", "-f", "1", "u"]);
    assert_eq!(c.max_in_flight, 5);
    assert_eq!(parse(&["--help"]), Ok(Command::Help));
    assert_eq!(parse(&["--version"]), Ok(Command::Version));
}

#[test]
fn usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-p", "1", "-r", "1", "-f", "1", "u"],
            "-parallel and -rate conflict",
        ),
        (
            &["-p", "1", "-f", "1", "-s", "1", "u"],
            "-fetches and -seconds conflict",
        ),
        (&["-f", "1", "u"], "start specifier"),
        (&["-p", "1", "u"], "end specifier"),
        (&["-p", "1", "-f", "1"], "url_file argument is missing"),
        (&["-p", "1", "-f", "1", "a", "b"], "only one url_file"),
        (
            &["-p", "1", "-f", "1", "-j", "u"],
            "-jitter only goes with -rate",
        ),
        (&["-p", "0", "-f", "1", "u"], "-parallel must be between"),
        (
            &["-p", "x", "-f", "1", "u"],
            "-parallel needs a whole number",
        ),
        (
            &["-p", "1", "-f", "1", "-timeout", "-3", "u"],
            "-timeout needs a positive",
        ),
        (&["-p", "1", "-f"], "-fetches needs a value"),
        (&["-x", "-p", "1", "-f", "1", "u"], "unknown flag -x"),
        (
            &["--bogus", "-p", "1", "-f", "1", "u"],
            "unknown option --bogus",
        ),
        (
            &["--keepalive=yes", "-p", "1", "-f", "1", "u"],
            "takes no value",
        ),
        (
            &["-p", "1", "-p", "2", "-f", "1", "u"],
            "-parallel given twice",
        ),
        (
            &["--threads", "4", "-p", "2", "-f", "1", "u"],
            "more than -parallel",
        ),
        (
            &["--threads", "0", "-p", "2", "-f", "1", "u"],
            "--threads must be between",
        ),
        (
            &["--max-in-flight", "4", "-p", "2", "-f", "1", "u"],
            "only goes with -rate",
        ),
        (
            &["-proxy", "h:0", "-p", "1", "-f", "1", "u"],
            "-proxy needs host:port",
        ),
    ];
    for (args, want) in cases {
        let e = usage_err(args);
        assert!(e.contains(want), "{args:?}: got '{e}', want '{want}'");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

/// Run the binary and check: exit status 2, one line on stderr naming the
/// problem, nothing on stdout.
fn exits_2(args: &[&str], want: &str) {
    let out = load(args, Duration::from_secs(20));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line wanted, got: {err}"
    );
    assert!(err.starts_with("spindle-load: "), "{err}");
    assert!(err.contains(want), "{args:?}: '{err}' should say '{want}'");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = d.join("no-such-file");
    exits_2(
        &["-p", "1", "-f", "1", missing.to_str().unwrap()],
        "No such file or directory",
    );
    let empty_line = write_file(
        d,
        "empty-line",
        "http://127.0.0.1:1/a\n\nhttp://127.0.0.1:1/b\n",
    );
    exits_2(
        &["-p", "1", "-f", "1", empty_line.to_str().unwrap()],
        "empty-line:2: empty line",
    );
    let bad = write_file(
        d,
        "bad",
        "http://127.0.0.1:1/a\nhttp://127.0.0.1:notaport/\n",
    );
    exits_2(
        &["-p", "1", "-f", "1", bad.to_str().unwrap()],
        "bad:2: cannot parse URL",
    );
    let junk = write_file(d, "junk", "not a url at all\n");
    exits_2(
        &["-p", "1", "-f", "1", junk.to_str().unwrap()],
        "junk:1: cannot parse URL",
    );
    let tls = write_file(d, "tls", "https://127.0.0.1/\n");
    let missing = d.join("no-such-ca.pem");
    exits_2(
        &[
            "-p",
            "1",
            "-f",
            "1",
            "--cacert",
            missing.to_str().unwrap(),
            tls.to_str().unwrap(),
        ],
        "cannot read certificates from",
    );
    exits_2(
        &[
            "-p",
            "1",
            "-f",
            "1",
            "-proxy",
            "h:8080",
            tls.to_str().unwrap(),
        ],
        "https through -proxy is not supported",
    );
    let nothing = write_file(d, "nothing", "");
    exits_2(
        &["-p", "1", "-f", "1", nothing.to_str().unwrap()],
        "no URLs",
    );
    let good = write_file(d, "good", "http://127.0.0.1:1/\n");
    let g = good.to_str().unwrap();
    exits_2(&["-p", "1", "-r", "5", "-f", "1", g], "conflict");
    exits_2(&["-p", "1", "-f", "1", "-s", "1", g], "conflict");
    exits_2(&["-p", "1", "-f", "1", "-nonsense", g], "unknown flag");
    let sips = write_file(d, "sips", "127.0.0.2\nnot-an-ip\n");
    exits_2(
        &["-sip", sips.to_str().unwrap(), "-p", "1", "-f", "1", g],
        "cannot convert source IP address",
    );
    let unresolvable = write_file(d, "unres", "http://no-such-host.invalid/\n");
    exits_2(
        &["-p", "1", "-f", "1", unresolvable.to_str().unwrap()],
        "cannot resolve host",
    );
    exits_2(&["-p", "1000000", "-f", "1", g], "RLIMIT_NOFILE");
}

#[test]
fn help_goes_to_stdout_with_status_0() {
    let out = load(&["--help"], Duration::from_secs(20));
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("usage:  spindle-load"));
}
