//! Parameter sweeps that redraw the paper's five figures, plus the
//! acceptance bars. Every point is run `reps` times, interleaved across
//! models and points (odd repetitions walk the plan backwards), and the
//! median is reported, because the machine is shared and noisy.

use crate::bench::{
    max_pipes_for, raise_nofile, Config, Model, Route, RunResult, MAX_FDS, MAX_PASSES, MAX_SIZE,
    MAX_TOKENS, RESERVED_FDS,
};
use crate::plot::{self, LegendAt, Series};
use crate::{run_once, Args, MAX_POINT_MS, MAX_REPS};
use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Passes of the first calibration run of each point.
pub const CALIB_PASSES: u64 = 200;
/// Target duration of the second calibration run.
pub const CALIB_MS: f64 = 20.0;
/// Fewest passes in a timed run.
pub const MIN_PASSES: u64 = 200;

const FDS_POINTS: &[usize] = &[
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000,
];
const SIZE_POINTS: &[usize] = &[
    1, 2, 4, 8, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
    131_072, 262_144, 524_288, 1_048_576,
];
const TOKEN_POINTS: &[usize] = &[
    1, 2, 4, 8, 12, 16, 19, 24, 32, 48, 64, 80, 96, 112, 122, 128, 192, 256, 512, 1024, 2048, 4096,
];

/// Sweep settings (from [`Args`]).
#[derive(Debug, Clone, Serialize)]
pub struct SweepOpts {
    pub reps: usize,
    pub point_ms: u64,
    pub fds_max: usize,
    pub size_max: usize,
    pub tokens_max: usize,
    /// Pipes in figures 4 and 5.
    pub base_fds: usize,
    /// Tokens in figures 1-4.
    pub base_tokens: usize,
    /// Message size in figures 1-3 and 5.
    pub base_size: usize,
    /// What the figures plot.
    pub metric: Metric,
    #[serde(skip)]
    pub stall: Duration,
}

/// Which rate a sweep reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Passes per second of the benchmark thread's CPU time (user + system).
    /// The paper's runs were at 100% CPU, so on an idle machine this equals
    /// the wall-clock rate; on a shared machine it leaves out the time the
    /// thread spent waiting for a core.
    Cpu,
    /// Passes per wall-clock second.
    Wall,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cpu => "passes_per_cpu_sec",
            Metric::Wall => "passes_per_wall_sec",
        }
    }
}

impl SweepOpts {
    /// Validate the sweep flags, raise `RLIMIT_NOFILE` and clamp the
    /// descriptor counts to what it allows (with a warning).
    pub fn from_args(a: &Args, stall: Duration) -> Result<SweepOpts> {
        if a.reps == 0 || a.reps > MAX_REPS {
            bail!("--reps must be 1..={MAX_REPS}, got {}", a.reps);
        }
        if a.point_ms == 0 || a.point_ms > MAX_POINT_MS {
            bail!("--point-ms must be 1..={MAX_POINT_MS}, got {}", a.point_ms);
        }
        if a.fds_max == 0 || a.fds_max > MAX_FDS {
            bail!("--fds-max must be 1..={MAX_FDS}, got {}", a.fds_max);
        }
        if a.fds == 0 || a.fds > MAX_FDS {
            bail!("--fds must be 1..={MAX_FDS}, got {}", a.fds);
        }
        if a.size_max == 0 || a.size_max > MAX_SIZE {
            bail!("--size-max must be 1..={MAX_SIZE}, got {}", a.size_max);
        }
        if a.tokens_max == 0 || a.tokens_max > MAX_TOKENS {
            bail!(
                "--tokens-max must be 1..={MAX_TOKENS}, got {}",
                a.tokens_max
            );
        }
        let mut o = SweepOpts {
            reps: a.reps,
            point_ms: a.point_ms,
            fds_max: a.fds_max,
            size_max: a.size_max,
            tokens_max: a.tokens_max,
            base_fds: a.fds,
            base_tokens: a.tokens,
            base_size: a.size,
            metric: a.metric,
            stall,
        };
        // Check the base values through the same validation a run uses.
        Config::new(Model::Epoll, o.base_fds, o.base_tokens, o.base_size, 1).validate()?;
        let want = 2 * o.fds_max.max(o.base_fds) + RESERVED_FDS;
        let limit = raise_nofile(want)?;
        let max = max_pipes_for(limit);
        if o.fds_max > max || o.base_fds > max {
            eprintln!(
                "pipetest: warning: RLIMIT_NOFILE is {limit} and cannot be raised to {want}; \
                 clamping descriptor counts to {max} pipes"
            );
            o.fds_max = o.fds_max.min(max);
            o.base_fds = o.base_fds.min(max);
        }
        Ok(o)
    }
}

/// One model variant (a line in a figure).
#[derive(Debug, Clone, Copy)]
struct Variant {
    model: Model,
    edge: bool,
    multishot: bool,
    route: Route,
}

const fn v(model: Model) -> Variant {
    Variant {
        model,
        edge: false,
        multishot: false,
        route: Route::Ring,
    }
}

const MULTISHOT: Variant = Variant {
    model: Model::UringPoll,
    edge: false,
    multishot: true,
    route: Route::Ring,
};

/// The same variant on the pair route (all but the tokens' pipes idle).
const fn pair(mut x: Variant) -> Variant {
    x.route = Route::Pair;
    x
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Axis {
    Fds,
    Size,
    Tokens,
}

struct Spec {
    number: u32,
    title: &'static str,
    paper: &'static [&'static str],
    axis: Axis,
    xs: Vec<usize>,
    variants: Vec<Variant>,
    legend: LegendAt,
}

/// The paper's own words about each figure (quoted from the OLS 2002 text).
pub const PAPER: [&[&str]; 5] = [
    &[
        "the existing poll() model exhibits a rapid decay as the number of active file descriptors increases. This stems from poll()'s O(n) workload in searching for active file descriptors.",
        "Async poll remains flat as the number of fds increases, as does epoll.",
        "The overhead of epoll appears to be about half of async poll, which points to a few shortcomings in the allocation and initialization of the async poll structures.",
    ],
    &[
        "In an attempt to reduce the overhead present in async poll relative to epoll, a fastpath that does not allocate any control data structures leads was created. In Figure 2 we can see this leads to an approximately 20% improvement in thput.",
        "The addition of the io_getevents vsyscall lead to 20% increase in performance, bringing async poll to roughly three quarters of epoll thput.",
    ],
    &[
        "Figure 3 compares async read to epoll and async poll thput.",
        "This brings async read throughput to within 15 of epoll in the worst case.",
        "As expected, async read also maintains a flat response when the number of open file descriptors increases.",
    ],
    &[
        "for message sizes of 256 bytes or less, the async read overhead outweighs the effects of single copy.",
        "However, for message sizes of 512 bytes and greater, async read is able to exceed epoll throughput, but only by a small margin.",
    ],
    &[
        "Figure 5 shows the results of a run with the number of IOs through to 60, 128 file descriptors and a 12 byte message size.",
        "The event driven models show a small increase in throughput up to 122 IOs, then remain fairly flat.",
        "Poll is included to show that it takes at least 15% of the file descriptors to have IOs in flight to match async poll performance, and almost half to match async reads.",
    ],
];

fn points(list: &[usize], max: usize) -> Vec<usize> {
    let mut xs: Vec<usize> = list.iter().copied().filter(|&x| x <= max).collect();
    if xs.last() != Some(&max) {
        xs.push(max);
    }
    xs
}

fn spec(n: u32, o: &SweepOpts) -> Result<Spec> {
    use Model::*;
    let fds_xs = points(FDS_POINTS, o.fds_max);
    let paper = PAPER[(n as usize).saturating_sub(1).min(4)];
    Ok(match n {
        1 => Spec {
            number: 1,
            title: "Fig. 1: passes/s vs descriptors (poll, epoll, async poll)",
            paper,
            axis: Axis::Fds,
            xs: fds_xs,
            variants: vec![
                v(Select),
                v(Poll),
                v(Epoll),
                v(AioPoll),
                pair(v(Epoll)),
                pair(v(AioPoll)),
            ],
            legend: LegendAt::LowerLeft,
        },
        2 => Spec {
            number: 2,
            title: "Fig. 2: io_uring poll, one-shot vs multishot",
            paper,
            axis: Axis::Fds,
            xs: fds_xs,
            variants: vec![
                v(UringPoll),
                MULTISHOT,
                v(Epoll),
                v(AioPoll),
                pair(v(UringPoll)),
                pair(MULTISHOT),
            ],
            legend: LegendAt::LowerLeft,
        },
        3 => Spec {
            number: 3,
            title: "Fig. 3: async read (io_uring READ) vs epoll and async poll",
            paper,
            axis: Axis::Fds,
            xs: fds_xs,
            variants: vec![
                v(UringRead),
                v(Epoll),
                v(AioPoll),
                v(UringPoll),
                pair(v(UringRead)),
            ],
            legend: LegendAt::LowerLeft,
        },
        4 => Spec {
            number: 4,
            title: "Fig. 4: passes/s vs message size",
            paper,
            axis: Axis::Size,
            xs: points(SIZE_POINTS, o.size_max),
            variants: vec![v(Poll), v(Epoll), v(AioPoll), v(UringPoll), v(UringRead)],
            legend: LegendAt::LowerLeft,
        },
        5 => Spec {
            number: 5,
            title: "Fig. 5: passes/s vs tokens in flight",
            paper,
            axis: Axis::Tokens,
            xs: points(TOKEN_POINTS, o.tokens_max),
            variants: vec![
                v(Poll),
                v(Epoll),
                v(AioPoll),
                v(UringPoll),
                MULTISHOT,
                v(UringRead),
            ],
            legend: LegendAt::LowerRight,
        },
        _ => bail!("no figure {n}: figures are 1 to 5"),
    })
}

fn config_for(var: Variant, axis: Axis, x: usize, o: &SweepOpts) -> Config {
    let (fds, tokens, size) = match axis {
        Axis::Fds => (x, o.base_tokens, o.base_size),
        Axis::Size => (o.base_fds, o.base_tokens, x),
        Axis::Tokens => (o.base_fds, x, o.base_size),
    };
    let mut c = Config::new(var.model, fds, tokens, size, 1);
    c.edge = var.edge;
    c.multishot = var.multishot;
    c.route = var.route;
    c.stall = o.stall;
    c
}

fn run_passes(cfg: &Config, passes: u64) -> Result<RunResult> {
    let mut c = *cfg;
    c.passes = passes;
    run_once(&c).with_context(|| {
        format!(
            "{} fds={} tokens={} size={} passes={passes}",
            c.label(),
            c.fds,
            c.tokens,
            c.size
        )
    })
}

/// Pick a pass count that takes about `point_ms`; the two calibration runs
/// double as warm-up.
fn calibrate(cfg: &Config, point_ms: u64) -> Result<u64> {
    let r1 = run_passes(cfg, CALIB_PASSES)?;
    // Sized by wall-clock rate, which bounds how long the sweep takes.
    let p2 = ((r1.passes_per_sec * CALIB_MS / 1000.0) as u64).clamp(MIN_PASSES, MAX_PASSES);
    let r2 = run_passes(cfg, p2)?;
    Ok(((r2.passes_per_sec * point_ms as f64 / 1000.0) as u64).clamp(MIN_PASSES, MAX_PASSES))
}

fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// One point of a sweep, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct PointSummary {
    pub series: String,
    pub x: usize,
    pub fds: usize,
    pub tokens: usize,
    pub size: usize,
    pub passes_per_run: u64,
    pub reps: usize,
    /// The plotted metric ([`SweepOpts::metric`]): median, min, max.
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub median_passes_per_cpu_sec: f64,
    pub median_passes_per_wall_sec: f64,
    /// Median share of wall time the thread was on a CPU.
    pub median_cpu_share: f64,
    pub samples_cpu: Vec<f64>,
    pub samples_wall: Vec<f64>,
}

/// Facts about the machine a sweep ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub unix_time: u64,
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn machine_start() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    Machine {
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        cpu,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg_start: read_trim("/proc/loadavg"),
        loadavg_end: String::new(),
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// A planned point: which series and configuration.
struct Planned {
    series: String,
    x: usize,
    cfg: Config,
    passes: u64,
    samples_cpu: Vec<f64>,
    samples_wall: Vec<f64>,
}

/// Calibrate every point, then run `reps` interleaved repetitions.
fn sweep(name: &str, mut plan: Vec<Planned>, o: &SweepOpts) -> Result<Vec<PointSummary>> {
    let t0 = std::time::Instant::now();
    for p in plan.iter_mut() {
        p.passes = calibrate(&p.cfg, o.point_ms)?;
    }
    eprintln!(
        "pipetest: {name}: {} points calibrated in {:.1}s",
        plan.len(),
        t0.elapsed().as_secs_f64()
    );
    for rep in 0..o.reps {
        let order: Vec<usize> = if rep % 2 == 0 {
            (0..plan.len()).collect()
        } else {
            (0..plan.len()).rev().collect()
        };
        for k in order {
            let p = &mut plan[k];
            let r = run_passes(&p.cfg, p.passes)?;
            p.samples_cpu.push(r.passes_per_cpu_sec);
            p.samples_wall.push(r.passes_per_sec);
        }
        eprintln!(
            "pipetest: {name}: repetition {}/{} done at {:.1}s",
            rep + 1,
            o.reps,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(plan
        .into_iter()
        .map(|p| {
            let shares: Vec<f64> = p
                .samples_wall
                .iter()
                .zip(&p.samples_cpu)
                .map(|(w, c)| w / c)
                .collect();
            let chosen = match o.metric {
                Metric::Cpu => &p.samples_cpu,
                Metric::Wall => &p.samples_wall,
            };
            PointSummary {
                series: p.series,
                x: p.x,
                fds: p.cfg.fds,
                tokens: p.cfg.tokens,
                size: p.cfg.size,
                passes_per_run: p.passes,
                reps: chosen.len(),
                median: median(chosen),
                min: chosen.iter().copied().fold(f64::INFINITY, f64::min),
                max: chosen.iter().copied().fold(0.0, f64::max),
                median_passes_per_cpu_sec: median(&p.samples_cpu),
                median_passes_per_wall_sec: median(&p.samples_wall),
                median_cpu_share: median(&shares),
                samples_cpu: p.samples_cpu,
                samples_wall: p.samples_wall,
            }
        })
        .collect())
}

/// Header of every figure CSV.
pub const CSV_HEADER: &str = "figure,series,x,fds,tokens,size,passes_per_run,reps,metric,\
median,min,max,median_passes_per_cpu_sec,median_passes_per_wall_sec,median_cpu_share";

fn csv(fig: &str, metric: Metric, pts: &[PointSummary]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for p in pts {
        let _ = writeln!(
            s,
            "{fig},{},{},{},{},{},{},{},{},{:.0},{:.0},{:.0},{:.0},{:.0},{:.3}",
            p.series,
            p.x,
            p.fds,
            p.tokens,
            p.size,
            p.passes_per_run,
            p.reps,
            metric.name(),
            p.median,
            p.min,
            p.max,
            p.median_passes_per_cpu_sec,
            p.median_passes_per_wall_sec,
            p.median_cpu_share
        );
    }
    s
}

#[derive(Serialize)]
struct FigureJson<'a> {
    figure: u32,
    title: &'a str,
    x_axis: Axis,
    paper_says: &'a [&'a str],
    method: &'a str,
    machine: &'a Machine,
    opts: &'a SweepOpts,
    points: &'a [PointSummary],
}

const METHOD: &str = "Each point: two calibration runs (also warm-up) size a run to about \
point_ms of wall time; then reps timed runs, interleaved across all points and models of the \
figure (odd repetitions in reverse order); the median of the chosen metric is plotted \
(passes per CPU-second of the benchmark thread by default, passes per wall second also \
recorded). Each run opens fresh pipes, verifies every token at the end and closes them.";

/// Paths and data of one drawn figure.
#[derive(Debug, Clone)]
pub struct FigureReport {
    pub svg: PathBuf,
    pub csv: PathBuf,
    pub json: PathBuf,
    pub points: Vec<PointSummary>,
}

/// Sweep figure `n` (1-5) and write `figN.svg`, `figN.csv`, `figN.json`
/// into `out`.
pub fn run_figure(n: u32, o: &SweepOpts, out: &Path) -> Result<FigureReport> {
    let s = spec(n, o)?;
    let mut machine = machine_start();
    let mut plan = Vec::new();
    for &x in &s.xs {
        for &var in &s.variants {
            let cfg = config_for(var, s.axis, x, o);
            if cfg.validate().is_err() {
                // e.g. select above FD_SETSIZE: that line simply ends.
                continue;
            }
            plan.push(Planned {
                series: cfg.label(),
                x,
                cfg,
                passes: 0,
                samples_cpu: Vec::new(),
                samples_wall: Vec::new(),
            });
        }
    }
    if plan.is_empty() {
        bail!("figure {n}: no valid point to run");
    }
    let pts = sweep(&format!("figure {n}"), plan, o)?;
    machine.loadavg_end = read_trim("/proc/loadavg");

    let svg = out.join(format!("fig{n}.svg"));
    let csvp = out.join(format!("fig{n}.csv"));
    let json = out.join(format!("fig{n}.json"));
    let mut series: Vec<Series> = Vec::new();
    for var in &s.variants {
        let label = config_for(*var, s.axis, 1, o).label();
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.series == label)
            .map(|p| (p.x as f64, p.median))
            .collect();
        if !pts.is_empty() {
            series.push(Series { label, points: pts });
        }
    }
    let (x_label, x_log) = match s.axis {
        Axis::Fds => ("pipes (descriptor pairs), log scale", true),
        Axis::Size => ("message size in bytes, log scale", true),
        Axis::Tokens => ("tokens in flight", false),
    };
    let subtitle = format!(
        "{} | {} | median of {} interleaved runs, {}",
        match s.axis {
            Axis::Fds => format!("{} token(s) of {} B", o.base_tokens, o.base_size),
            Axis::Size => format!("{} pipes, {} token(s)", o.base_fds, o.base_tokens),
            Axis::Tokens => format!("{} pipes, {} B messages", o.base_fds, o.base_size),
        },
        format_args!("Linux {}", machine.kernel),
        o.reps,
        match o.metric {
            Metric::Cpu => "passes per CPU-second of the benchmark thread",
            Metric::Wall => "passes per wall-clock second",
        }
    );
    plot::draw(&svg, s.title, &subtitle, x_label, x_log, &series, s.legend)
        .with_context(|| format!("drawing {}", svg.display()))?;
    std::fs::write(&csvp, csv(&s.number.to_string(), o.metric, &pts))
        .with_context(|| format!("writing {}", csvp.display()))?;
    let j = FigureJson {
        figure: s.number,
        title: s.title,
        x_axis: s.axis,
        paper_says: s.paper,
        method: METHOD,
        machine: &machine,
        opts: o,
        points: &pts,
    };
    std::fs::write(&json, serde_json::to_string_pretty(&j)?)
        .with_context(|| format!("writing {}", json.display()))?;
    Ok(FigureReport {
        svg,
        csv: csvp,
        json,
        points: pts,
    })
}

/// One acceptance bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub series: String,
    pub low_fds: usize,
    pub high_fds: usize,
    pub median_low: f64,
    pub median_high: f64,
    pub ratio: f64,
    /// "< 0.5" or ">= 0.7", or empty when informational.
    pub requirement: String,
    pub pass: Option<bool>,
}

/// The bars run's result.
#[derive(Debug, Clone, Serialize)]
pub struct BarsReport {
    pub bars: Vec<Bar>,
    pub machine: Machine,
    pub reps: usize,
    pub points: Vec<PointSummary>,
    #[serde(skip)]
    pub summary: String,
}

/// Descriptor count at the low end of the bars.
pub const BARS_LOW_FDS: usize = 10;

/// poll, epoll and uring-poll (plus multishot and aio-poll, for the record)
/// at 10 and `fds_max` pipes, on both routes, in one interleaved run; writes
/// `bars.csv` and `bars.json`.
pub fn run_bars(o: &SweepOpts, out: &Path) -> Result<BarsReport> {
    use Model::*;
    let ring = [v(Poll), v(Epoll), v(UringPoll), MULTISHOT, v(AioPoll)];
    let variants: Vec<Variant> = ring
        .iter()
        .copied()
        .chain(ring.iter().map(|&x| pair(x)))
        .collect();
    let high = o.fds_max.max(BARS_LOW_FDS);
    let mut machine = machine_start();
    let mut plan = Vec::new();
    for &x in &[BARS_LOW_FDS, high] {
        for &var in &variants {
            let cfg = config_for(var, Axis::Fds, x, o);
            plan.push(Planned {
                series: cfg.label(),
                x,
                cfg,
                passes: 0,
                samples_cpu: Vec::new(),
                samples_wall: Vec::new(),
            });
        }
    }
    let pts = sweep("bars", plan, o)?;
    machine.loadavg_end = read_trim("/proc/loadavg");
    let mut bars = Vec::new();
    let mut summary = format!(
        "pipetest bars: median {} of {} interleaved runs, {} vs {} pipes, \
         {} token(s) of {} B, Linux {}\n",
        o.metric.name(),
        o.reps,
        BARS_LOW_FDS,
        high,
        o.base_tokens,
        o.base_size,
        machine.kernel
    );
    for var in &variants {
        let label = config_for(*var, Axis::Fds, 1, o).label();
        let get = |x: usize| {
            pts.iter()
                .find(|p| p.series == label && p.x == x)
                .map_or(f64::NAN, |p| p.median)
        };
        let (lo, hi) = (get(BARS_LOW_FDS), get(high));
        let ratio = hi / lo;
        let (req, pass) = match var.model {
            Poll => ("< 0.5".to_string(), Some(ratio < 0.5)),
            Epoll => (">= 0.7".to_string(), Some(ratio >= 0.7)),
            UringPoll if !var.multishot => (">= 0.7".to_string(), Some(ratio >= 0.7)),
            _ => (String::new(), None),
        };
        let _ = writeln!(
            summary,
            "  {label:<22} {lo:>10.0} -> {hi:>10.0}  ratio {ratio:.3}  {}",
            match pass {
                Some(true) => format!("PASS (needs {req})"),
                Some(false) => format!("FAIL (needs {req})"),
                None => "(for the record)".to_string(),
            }
        );
        bars.push(Bar {
            series: label,
            low_fds: BARS_LOW_FDS,
            high_fds: high,
            median_low: lo,
            median_high: hi,
            ratio,
            requirement: req,
            pass,
        });
    }
    let report = BarsReport {
        bars,
        machine,
        reps: o.reps,
        points: pts,
        summary,
    };
    std::fs::write(out.join("bars.csv"), csv("bars", o.metric, &report.points))
        .context("writing bars.csv")?;
    std::fs::write(
        out.join("bars.json"),
        serde_json::to_string_pretty(&report)?,
    )
    .context("writing bars.json")?;
    Ok(report)
}
