//! Replays every input the fuzzers kept (`fuzz/corpus/<target>/`) through
//! the same checks, on stable Rust: each was a new path through the code
//! once, and each crash found and fixed stays there as a regression test.

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 4,
        "{}: only {} inputs",
        dir.display(),
        inputs.len()
    );
    for p in &inputs {
        let data = std::fs::read(p).expect("corpus input");
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{target}: {} fails", p.display());
    }
}

#[test]
fn session_corpus() {
    replay("session", spindle_fuzz::session);
}

#[test]
fn range_corpus() {
    replay("range", spindle_fuzz::range);
}

#[test]
fn target_corpus() {
    replay("target", spindle_fuzz::target);
}

#[test]
fn config_corpus() {
    replay("config", spindle_fuzz::config);
}

/// The checks can fail: a path with a `..` segment is caught ...
#[test]
#[should_panic(expected = "dot segment")]
fn the_path_check_catches_dot_dot() {
    spindle_fuzz::check_path(b"a/../b", true);
}

/// ... and so is a body shorter than its Content-Length.
#[test]
#[should_panic(expected = "Content-Length against the body")]
fn the_response_check_catches_a_short_body() {
    let mut fields = spindle_core::Fields::new();
    fields.push("Content-Length", b"5");
    let mut front = Vec::new();
    fields.write_http1(200, &mut front);
    front.extend_from_slice(b"abc");
    let resp = spindle_core::Response {
        status: 200,
        fields,
        front,
        file: None,
        version: None,
        keep_alive: true,
        body_len: 3,
        parts: Vec::new(),
        continued: false,
    };
    spindle_fuzz::check_response(&spindle_core::Session::new(), &resp, None);
}

#[test]
fn tls_corpus() {
    replay("tls", spindle_fuzz::tls);
}

/// spindle's own record layer: its corpus, and the `tls` target's
/// (handshakes from real clients, and what the fuzzer grew from them).
#[test]
fn tlsrec_corpus() {
    replay("tlsrec", spindle_fuzz::tlsrec);
    replay("tls", spindle_fuzz::tlsrec);
}

#[test]
fn h2_corpus() {
    replay("h2", spindle_fuzz::h2);
}

#[test]
fn h3_corpus() {
    replay("h3", spindle_fuzz::h3);
}

#[test]
fn h3_conn_corpus() {
    replay("h3_conn", spindle_fuzz::h3_conn);
}

#[test]
fn proxy_corpus() {
    replay("proxy", spindle_fuzz::proxy);
}
