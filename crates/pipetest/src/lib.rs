//! `spindle-bench pipetest`: a rebuild of the pipetest program from Benjamin
//! LaHaise's "An AIO Implementation and its Behaviour" (OLS 2002).
//!
//! One process opens `--fds` pipes, seeds `--tokens` tokens of `--size`
//! bytes, and passes them around a ring of pipes: read a token from a ready
//! pipe, write it to the next pipe, repeat `--passes` times. It reports token
//! passes per second under each I/O model (`--model`), and with `--figure N`
//! it sweeps one parameter to redraw the paper's figures as SVG, CSV and JSON.
//! Every run verifies at the end that every token came back exactly once with
//! its contents intact.

mod aio;
mod bench;
mod figure;
mod plot;
mod readiness;
mod uring;

#[cfg(test)]
mod tests;

pub use bench::{
    max_pipes_for, raise_nofile, Config, Model, Route, RunResult, DEFAULT_STALL, MAX_FDS,
    MAX_PASSES, MAX_SIZE, MAX_TOKENS, RESERVED_FDS,
};
pub use figure::{run_bars, run_figure, BarsReport, FigureReport, Metric, SweepOpts};

use anyhow::{bail, Result};
use bench::Bench;
#[doc(hidden)]
pub use bench::Fault;
use std::path::PathBuf;
use std::time::Duration;

/// Most repetitions per sweep point.
pub const MAX_REPS: usize = 51;
/// Longest target duration of one timed run in a sweep.
pub const MAX_POINT_MS: u64 = 10_000;

/// Command-line arguments of `spindle-bench pipetest`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// I/O model for a single run.
    #[arg(long, value_enum, default_value_t = Model::Epoll)]
    pub model: Model,
    /// epoll: edge-triggered instead of level-triggered.
    #[arg(long)]
    pub edge: bool,
    /// uring-poll: multishot POLL_ADD instead of one-shot.
    #[arg(long)]
    pub multishot: bool,
    /// Token route: "ring" (to the next pipe; every pipe carries traffic in
    /// turn, as the 2002 pipetest did) or "pair" (each token bounces inside
    /// its own pair of pipes; all other pipes stay idle).
    #[arg(long, value_enum, default_value_t = Route::Ring)]
    pub route: Route,
    /// Number of pipes (each is two descriptors). Also the pipe count of
    /// figures 4 and 5.
    #[arg(long, default_value_t = 128)]
    pub fds: usize,
    /// Tokens in flight. Also the token count of figures 1 to 4.
    #[arg(long, default_value_t = 1)]
    pub tokens: usize,
    /// Message (token) size in bytes. Also the size in figures 1-3 and 5.
    #[arg(long, default_value_t = 12)]
    pub size: usize,
    /// Passes to time in a single run (figures size their runs by --point-ms).
    #[arg(long, default_value_t = 200_000)]
    pub passes: u64,
    /// Seconds without progress before a run is declared stalled.
    #[arg(long, default_value_t = 2.0)]
    pub stall_secs: f64,
    /// Print the single run's result as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Redraw a figure of the paper: 1-5, "all" (1 to 5, then bars) or
    /// "bars" (the acceptance bars: poll, epoll, uring-poll at 10 and
    /// --fds-max descriptors, interleaved).
    #[arg(long, value_parser = parse_figure)]
    pub figure: Option<FigureSel>,
    /// Directory for figure output (figN.svg, figN.csv, figN.json).
    #[arg(long, default_value = "pipetest-out")]
    pub out: PathBuf,
    /// Repetitions per sweep point (interleaved across models and points;
    /// the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Target duration of one timed run in a sweep, in milliseconds.
    #[arg(long, default_value_t = 150)]
    pub point_ms: u64,
    /// What figures plot: "cpu" (passes per CPU-second of the benchmark
    /// thread; the paper's runs were at 100% CPU) or "wall" (passes per
    /// wall-clock second). Both are recorded in CSV and JSON.
    #[arg(long, value_enum, default_value_t = Metric::Cpu)]
    pub metric: Metric,
    /// Largest descriptor count in the sweeps of figures 1-3 and the bars.
    #[arg(long, default_value_t = 10_000)]
    pub fds_max: usize,
    /// Largest message size in figure 4.
    #[arg(long, default_value_t = 65_536)]
    pub size_max: usize,
    /// Largest token count in figure 5.
    #[arg(long, default_value_t = 128)]
    pub tokens_max: usize,
}

/// What `--figure` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureSel {
    One(u32),
    All,
    Bars,
}

fn parse_figure(s: &str) -> Result<FigureSel, String> {
    match s {
        "all" => Ok(FigureSel::All),
        "bars" => Ok(FigureSel::Bars),
        _ => match s.parse::<u32>() {
            Ok(n @ 1..=5) => Ok(FigureSel::One(n)),
            _ => Err(format!("expected 1-5, all or bars, got {s:?}")),
        },
    }
}

/// Run one configuration once: set up, pass tokens, verify, report.
pub fn run_once(cfg: &Config) -> Result<RunResult> {
    run_with_fault(cfg, Fault::None)
}

/// [`run_once`] with a deliberate fault injected at seeding (for tests).
#[doc(hidden)]
pub fn run_with_fault(cfg: &Config, fault: Fault) -> Result<RunResult> {
    cfg.validate()?;
    let mut b = Bench::new(cfg, cfg.model == Model::UringRead)?;
    // Every model sets up (poll set, epoll registrations, AIO and io_uring
    // requests armed on every pipe) before it seeds the tokens, which starts
    // the clock: setup is not timed, as in the original pipetest. The
    // asynchronous models thus arm every pipe before the seed tokens go in
    // (the paper posts its async reads before the token writes).
    match cfg.model {
        Model::Select => readiness::run_select(&mut b, fault)?,
        Model::Poll => readiness::run_poll(&mut b, fault)?,
        Model::Epoll => readiness::run_epoll(&mut b, cfg.edge, fault)?,
        Model::AioPoll => aio::run_aio_poll(&mut b, fault)?,
        Model::UringPoll => uring::run_uring_poll(&mut b, cfg.multishot, fault)?,
        Model::UringRead => uring::run_uring_read(&mut b, fault)?,
    }
    b.finish(cfg.label())
}

fn stall_from(secs: f64) -> Result<Duration> {
    if !(0.01..=3600.0).contains(&secs) {
        bail!("--stall-secs must be between 0.01 and 3600, got {secs}");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Runs `spindle-bench pipetest`.
pub fn run(args: Args) -> Result<()> {
    let stall = stall_from(args.stall_secs)?;
    match args.figure {
        None => {
            let mut cfg = Config::new(args.model, args.fds, args.tokens, args.size, args.passes);
            cfg.edge = args.edge;
            cfg.multishot = args.multishot;
            cfg.route = args.route;
            cfg.stall = stall;
            cfg.validate()?;
            let limit = raise_nofile(2 * cfg.fds + RESERVED_FDS)?;
            let max = max_pipes_for(limit);
            if cfg.fds > max {
                eprintln!(
                    "pipetest: warning: RLIMIT_NOFILE is {limit} and cannot be raised; \
                     clamping --fds {} to {max}",
                    cfg.fds
                );
                cfg.fds = max;
            }
            let r = run_once(&cfg)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "model={} route={} fds={} tokens={} size={} passes={} elapsed={:.3}s \
                     cpu={:.3}s passes/s={:.0} passes/cpu-s={:.0} verified={} tokens{}",
                    r.label,
                    cfg.route.name(),
                    r.fds,
                    r.tokens,
                    r.size,
                    r.passes,
                    r.elapsed_s,
                    r.cpu_s,
                    r.passes_per_sec,
                    r.passes_per_cpu_sec,
                    r.tokens_verified,
                    match r.hops_counted {
                        Some(h) => format!(", hop counters sum to {h}"),
                        None => String::new(),
                    }
                );
            }
            Ok(())
        }
        Some(sel) => {
            let opts = SweepOpts::from_args(&args, stall)?;
            std::fs::create_dir_all(&args.out)
                .map_err(|e| anyhow::anyhow!("cannot create --out {}: {e}", args.out.display()))?;
            let figs: Vec<u32> = match sel {
                FigureSel::One(n) => vec![n],
                FigureSel::All => (1..=5).collect(),
                FigureSel::Bars => vec![],
            };
            for n in figs {
                let rep = run_figure(n, &opts, &args.out)?;
                eprintln!("pipetest: figure {n} written: {}", rep.svg.display());
            }
            if matches!(sel, FigureSel::All | FigureSel::Bars) {
                let bars = run_bars(&opts, &args.out)?;
                println!("{}", bars.summary);
            }
            Ok(())
        }
    }
}
