//! The caching edge (issue 49): spindle in front of an origin (another
//! HTTP server, or an S3-compatible bucket), keeping what clients ask for
//! on its own disk in aligned slices. The parts without I/O are in
//! `spindle_core::edge`; here is the origin client ([`fetch`]), which runs
//! on helper threads, never on a worker.

pub mod fetch;
pub mod fetcher;
pub mod scratch;
pub mod store;

/// What a worker holds of the edge: the helpers, answering by ticket.
pub type Edge = fetcher::Fetcher<crate::conn::Ticket>;

/// The process's edge, for the metrics endpoint.
static RUNNING: std::sync::OnceLock<std::sync::Arc<Edge>> = std::sync::OnceLock::new();

/// Makes `edge` the one `--metrics` reports.
pub fn publish(edge: &std::sync::Arc<Edge>) {
    let _ = RUNNING.set(edge.clone());
}

/// The edge's metrics, in Prometheus' text format (nothing without
/// `--origin`).
pub fn metrics_text() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    let Some(e) = RUNNING.get() else {
        return String::new();
    };
    let c = e.counters();
    let st = &e.store().counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut o = String::new();
    let mut fam = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        crate::metrics::family_text(&mut o, name, kind, help, samples)
    };
    fam(
        "spindle_edge_lookups_total",
        "counter",
        "Requests for an origin's object: hit (fresh in the cache), revalidated (stale, asked of the origin), miss (not cached).",
        &[
            ("{result=\"hit\"}", get(&c.hits)),
            ("{result=\"revalidated\"}", get(&c.revalidations)),
            ("{result=\"miss\"}", get(&c.misses)),
        ],
    );
    fam(
        "spindle_edge_origin_requests_total",
        "counter",
        "Slices fetched from the origin (each once, however many requests wanted it).",
        &[("", get(&c.fetches))],
    );
    fam(
        "spindle_edge_origin_bytes_total",
        "counter",
        "Body bytes fetched from the origin.",
        &[("", get(&c.origin_bytes))],
    );
    fam(
        "spindle_edge_coalesced_total",
        "counter",
        "Wants of a slice already being fetched, answered by that fetch.",
        &[("", get(&c.coalesced))],
    );
    fam(
        "spindle_edge_errors_total",
        "counter",
        "Failures: origin (unreachable, 5xx, malformed), store (the cache could not be written), refused (the helpers' queue full).",
        &[
            ("{kind=\"origin\"}", get(&c.origin_errors)),
            ("{kind=\"store\"}", get(&c.store_errors)),
            ("{kind=\"refused\"}", get(&c.refused)),
        ],
    );
    fam(
        "spindle_edge_evictions_total",
        "counter",
        "Objects removed to keep the cache within --cache-size.",
        &[("", get(&st.evictions))],
    );
    fam(
        "spindle_edge_cache_bytes",
        "gauge",
        "Bytes of slices in the cache.",
        &[("", e.store().bytes())],
    );
    fam(
        "spindle_edge_passed_total",
        "counter",
        "Objects served without storing: no-store or private at the origin, or the cache could not be written.",
        &[("", get(&st.passed))],
    );
    fam(
        "spindle_edge_probation_total",
        "counter",
        "New objects stored last in line: the cache was full of objects asked for more often (TinyLFU admission).",
        &[("", get(&st.probation))],
    );
    fam(
        "spindle_edge_pass_bytes",
        "gauge",
        "Bytes of pass-through slices held in memory.",
        &[("", e.store().scratch_bytes())],
    );
    o
}
