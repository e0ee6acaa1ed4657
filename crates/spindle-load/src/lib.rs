//! spindle-load: an http_load-compatible HTTP load generator with latency
//! percentiles, keep-alive, idle connections, open-loop rates, and CPU and
//! disk sampling. The binary is a thin wrapper around [`run::run`]; the
//! modules are public so tests and the bench harness can reuse them.

pub mod cli;
pub mod engine;
pub mod gfmt;
pub mod http;
pub mod report;
pub mod run;
pub mod stats;
pub mod sys;
pub mod sysstat;
pub mod tls;
pub mod urls;
