//! Per-thread counters and latency histograms, merged at the end of a run.

use hdrhistogram::Histogram;

/// Largest latency the histograms hold, in microseconds (one hour); larger
/// values are clamped to it.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Significant digits the histograms keep.
pub const HIST_SIGFIG: u8 = 3;

/// One kind of latency: http_load's mean/max/min plus a histogram.
#[derive(Clone, Debug)]
pub struct Timing {
    pub count: u64,
    pub sum_us: u64,
    pub max_us: u64,
    pub min_us: u64,
    pub hist: Histogram<u64>,
}

impl Default for Timing {
    fn default() -> Self {
        Self::new()
    }
}

impl Timing {
    pub fn new() -> Self {
        Timing {
            count: 0,
            sum_us: 0,
            max_us: 0,
            min_us: u64::MAX,
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_US, HIST_SIGFIG)
                .expect("static histogram bounds are valid"),
        }
    }

    #[inline]
    pub fn record(&mut self, us: u64) {
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
        self.min_us = self.min_us.min(us);
        self.hist.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    pub fn merge(&mut self, o: &Timing) {
        self.count += o.count;
        self.sum_us += o.sum_us;
        self.max_us = self.max_us.max(o.max_us);
        self.min_us = self.min_us.min(o.min_us);
        self.hist
            .add(&o.hist)
            .expect("histograms with the same bounds add");
    }
}

/// Status codes are counted in an array indexed by code, as http_load does.
pub const MAX_STATUS: usize = 1000;

#[derive(Clone, Debug)]
pub struct Stats {
    pub fetches: u64,
    pub bytes: u64,
    pub connect: Timing,
    pub first_response: Timing,
    pub fetch: Timing,
    pub codes: Vec<u64>,
    pub timeouts: u64,
    pub errors: u64,
    pub bad_bytes: u64,
    pub bad_checksums: u64,
    /// Keep-alive connections the server closed (or asked to close).
    pub reconnects: u64,
    /// https: connections whose TLS handshake was a full one, and resumed ones.
    pub tls_full: u64,
    pub tls_resumed: u64,
    /// Idle connections held when the measured run started.
    pub idle_held_at_start: u64,
    /// Idle connections still held when the run ended.
    pub idle_held_at_end: u64,
    /// Idle connections the server closed during the run (each reopened).
    pub idle_dropped: u64,
    /// Idle connections that could not be opened.
    pub idle_errors: u64,
    /// CPU seconds the worker threads used in user mode during the measured
    /// run (idle setup and the final close excluded).
    pub cpu_user_secs: f64,
    /// The same, in the kernel.
    pub cpu_system_secs: f64,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        Stats {
            fetches: 0,
            bytes: 0,
            connect: Timing::new(),
            first_response: Timing::new(),
            fetch: Timing::new(),
            codes: vec![0; MAX_STATUS],
            timeouts: 0,
            errors: 0,
            bad_bytes: 0,
            bad_checksums: 0,
            reconnects: 0,
            tls_full: 0,
            tls_resumed: 0,
            idle_held_at_start: 0,
            idle_held_at_end: 0,
            idle_dropped: 0,
            idle_errors: 0,
            cpu_user_secs: 0.0,
            cpu_system_secs: 0.0,
        }
    }

    pub fn merge(&mut self, o: &Stats) {
        self.fetches += o.fetches;
        self.bytes += o.bytes;
        self.connect.merge(&o.connect);
        self.first_response.merge(&o.first_response);
        self.fetch.merge(&o.fetch);
        for (a, b) in self.codes.iter_mut().zip(&o.codes) {
            *a += b;
        }
        self.timeouts += o.timeouts;
        self.errors += o.errors;
        self.bad_bytes += o.bad_bytes;
        self.bad_checksums += o.bad_checksums;
        self.reconnects += o.reconnects;
        self.tls_full += o.tls_full;
        self.tls_resumed += o.tls_resumed;
        self.idle_held_at_start += o.idle_held_at_start;
        self.idle_held_at_end += o.idle_held_at_end;
        self.idle_dropped += o.idle_dropped;
        self.idle_errors += o.idle_errors;
        self.cpu_user_secs += o.cpu_user_secs;
        self.cpu_system_secs += o.cpu_system_secs;
    }
}
