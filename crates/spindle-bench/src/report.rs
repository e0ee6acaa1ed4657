//! Reports: JSON (every sample), Markdown (medians with min-max, ratios against the
//! baseline) and SVG bar charts (plotters).
//!
//! Two rules keep a report from saying more than its runs measured: a
//! `--quick` run is a smoke test (a notice above the tables, no ratio
//! columns), and a sample too short to mean anything ([`MIN_SAMPLE_SECONDS`],
//! [`MIN_WAVES`]) is marked in its table, whatever the flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::common::{stats, summary, Machine};

/// The measurements of one server in one group (e.g. "keep-alive"), one sample per round.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub group: String,
    pub server: String,
    pub samples: Vec<BTreeMap<String, f64>>,
    pub medians: BTreeMap<String, f64>,
    pub failures: Vec<String>,
    /// Samples too short to mean anything ([`Report::too_short`]).
    pub short_samples: usize,
    /// Why this server was not measured in this group, when it cannot
    /// take part (e.g. a coding it does not make): shown as "–".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
}

/// A sample that measured less than this is too short to mean anything.
/// In the committed full runs (docs/results, a quiet machine), series
/// whose samples lasted 2.4 s or more spread a median 12% between rounds
/// (142 series), those under 1 s a median 21% (24 series, `large`'s
/// single 700 MB downloads): as much as the gaps the experiments measure
/// (spindle io-uring against the best peer: 0.89-1.38x), and one round of
/// three reversed the order at one client. Length does not buy order on a
/// busy machine: with the two cores shared by other builds (load average
/// 5), `hot` samples spread 27-170% at 0.25 s, 23-109% at 1 s and
/// 45-158% at 3 s (2026-11-26, 5 rounds); this is a floor, not a guarantee.
pub const MIN_SAMPLE_SECONDS: f64 = 1.0;

/// A sample that ended fewer fetches than this many times its concurrency
/// (`waves`, see [`crate::common::load_metrics`]) is too short to mean
/// anything, however long it lasted: its first wave carries the first
/// accepts and opens and queues filling, its last the drain, and twenty
/// waves keep those two under a tenth of the run. `cold --quick` (200
/// fetches at -parallel 100: two waves) spread 43% (spindle io-uring) and
/// 56% (nginx aio threads) between 5 rounds on the busy machine above, and
/// the full run's samples (400 waves, a quiet machine) 8-17%.
pub const MIN_WAVES: f64 = 20.0;

/// Marks a row with a sample too short to mean anything.
pub const SHORT_MARK: &str = "†";

/// What a `--quick` report says above its tables (and on screen).
pub const SMOKE_NOTICE: &str = "Smoke test (--quick): these numbers are not a comparison. The data set is small and each run short, so they do not order the servers as the full experiment does; the run checks that the harness and every server work. Run without --quick for numbers to quote.";

/// A column of the Markdown table: metric key, header, decimals.
pub struct Column {
    pub key: &'static str,
    pub label: &'static str,
    pub decimals: usize,
}

pub const fn col(key: &'static str, label: &'static str, decimals: usize) -> Column {
    Column {
        key,
        label,
        decimals,
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub experiment: String,
    pub title: String,
    pub command: String,
    pub machine: Machine,
    pub params: Value,
    pub baseline: String,
    /// A row present in every group (e.g. "fio") that each row is also
    /// given as a fraction of, in a column of its own.
    pub reference: Option<String>,
    /// Also give each row as a fraction of the best peer in its group: the
    /// best row whose name is not spindle's and not the reference.
    pub vs_best_peer: bool,
    pub primary: String,
    pub notes: Vec<String>,
    pub series: Vec<Series>,
    pub extra: BTreeMap<String, Value>,
    #[serde(skip)]
    pub extra_md: Vec<String>,
    /// A `--quick` run: [`SMOKE_NOTICE`] above the tables, no ratio columns.
    pub smoke_test: bool,
    /// The method line: why this experiment's `--quick` is a smoke test.
    pub method: String,
    /// The length rule every sample is held to ([`MIN_SAMPLE_SECONDS`], [`MIN_WAVES`]).
    pub min_sample_seconds: f64,
    pub min_waves: f64,
}

impl Report {
    pub fn new(experiment: &str, title: &str, machine: Machine, params: Value) -> Report {
        Report {
            schema: "spindle-bench/1",
            experiment: experiment.into(),
            title: title.into(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine,
            params,
            baseline: String::new(),
            reference: None,
            vs_best_peer: false,
            primary: String::new(),
            notes: Vec::new(),
            series: Vec::new(),
            extra: BTreeMap::new(),
            extra_md: Vec::new(),
            smoke_test: false,
            method: String::new(),
            min_sample_seconds: MIN_SAMPLE_SECONDS,
            min_waves: MIN_WAVES,
        }
    }

    /// Makes this report a smoke test, `why` in its method line, and prints
    /// the notice.
    pub fn smoke_test(&mut self, why: &str) {
        self.smoke_test = true;
        self.method = why.to_string();
        self.announce();
    }

    /// Prints the smoke-test notice on screen, if this is one.
    pub fn announce(&self) {
        if self.smoke_test {
            eprintln!("NOTICE: {SMOKE_NOTICE}");
        }
    }

    /// Why `sample` is too short to mean anything, if it is: it measured
    /// less than [`MIN_SAMPLE_SECONDS`], or ended fewer than [`MIN_WAVES`]
    /// waves of fetches. A sample without `seconds` (or `waves`) is not
    /// held to that part of the rule.
    pub fn too_short(&self, sample: &BTreeMap<String, f64>) -> Option<String> {
        let secs = sample.get("seconds").copied();
        let waves = sample.get("waves").copied();
        let mut why = Vec::new();
        if let Some(s) = secs.filter(|s| *s < self.min_sample_seconds) {
            why.push(format!("{s:.2} s"));
        }
        if let Some(w) = waves.filter(|w| *w < self.min_waves) {
            why.push(format!("{w:.1} waves"));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// Marks (group, server) as not measured because the server cannot
    /// take part, `why` under the group's table.
    pub fn add_unsupported(&mut self, group: &str, server: &str, why: &str) {
        let idx = self.series_index(group, server);
        self.series[idx].unsupported = Some(why.to_string());
    }

    /// Adds a sample (or a failure) to the series of (group, server).
    pub fn add(&mut self, group: &str, server: &str, sample: Result<BTreeMap<String, f64>>) {
        let idx = self.series_index(group, server);
        let short = sample.as_ref().is_ok_and(|m| self.too_short(m).is_some());
        let s = &mut self.series[idx];
        s.short_samples += usize::from(short);
        match sample {
            Ok(m) => s.samples.push(m),
            Err(e) => s.failures.push(format!("{e:#}")),
        }
        let keys: Vec<String> = s.samples.iter().flat_map(|m| m.keys().cloned()).collect();
        for k in keys {
            if let Some((med, _, _)) = stats(&s.samples, &k) {
                s.medians.insert(k, med);
            }
        }
    }

    /// The index of the series of (group, server), made if missing.
    fn series_index(&mut self, group: &str, server: &str) -> usize {
        match self
            .series
            .iter()
            .position(|s| s.group == group && s.server == server)
        {
            Some(i) => i,
            None => {
                self.series.push(Series {
                    group: group.into(),
                    server: server.into(),
                    samples: Vec::new(),
                    medians: BTreeMap::new(),
                    failures: Vec::new(),
                    short_samples: 0,
                    unsupported: None,
                });
                self.series.len() - 1
            }
        }
    }

    pub fn groups(&self) -> Vec<String> {
        let mut g: Vec<String> = Vec::new();
        for s in &self.series {
            if !g.contains(&s.group) {
                g.push(s.group.clone());
            }
        }
        g
    }

    pub fn median(&self, group: &str, server: &str, key: &str) -> Option<f64> {
        self.series
            .iter()
            .find(|s| s.group == group && s.server == server)
            .and_then(|s| s.medians.get(key).copied())
    }

    /// `server`'s `key` in `group`, by the round its sample carries
    /// (`"round"`): for ratios of one round against the same round.
    pub fn per_round(&self, group: &str, server: &str, key: &str) -> BTreeMap<u64, f64> {
        self.series
            .iter()
            .filter(|x| x.group == group && x.server == server)
            .flat_map(|x| x.samples.iter())
            .filter_map(|m| Some((*m.get("round")? as u64, *m.get(key)?)))
            .collect()
    }

    /// The baseline over each peer, each round against the same round
    /// (the two measured within minutes of each other), as median
    /// (min–max) of the rounds' ratios of each of `keys` (key, label): a
    /// Markdown table with a row per group (`groups`: its label under
    /// `column`, its name) and peer. On a machine whose speed drifts for
    /// minutes at a time, these pairs hold still where the medians of
    /// each server's own rounds need not.
    pub fn round_by_round(
        &self,
        column: &str,
        groups: &[(String, String)],
        keys: &[(&str, &str)],
    ) -> String {
        let base = &self.baseline;
        let mut o = format!(
            "## Round by round\n\n{base} over each peer in the same round, median (min–max) of the rounds' ratios.\n\n| {column} | peer | rounds |"
        );
        for (_, label) in keys {
            o.push_str(&format!(" {label} ratio |"));
        }
        o.push_str(&format!("\n|---|---|---:|{}\n", "---:|".repeat(keys.len())));
        for (label, g) in groups {
            let peers = self.series.iter().filter(|s| {
                s.group == *g && !s.server.starts_with("spindle") && !s.samples.is_empty()
            });
            for peer in peers {
                let ratios = |key: &str| -> Vec<f64> {
                    let (a, b) = (
                        self.per_round(g, base, key),
                        self.per_round(g, &peer.server, key),
                    );
                    a.iter()
                        .filter_map(|(r, x)| Some(x / b.get(r)?).filter(|v| v.is_finite()))
                        .collect()
                };
                let rounds = ratios(keys[0].0).len();
                o.push_str(&format!("| {label} | {} | {rounds} |", peer.server));
                for (key, _) in keys {
                    o.push_str(&match summary(ratios(key)) {
                        Some((med, lo, hi)) => format!(" {med:.2}× ({lo:.2}–{hi:.2}) |"),
                        None => " – |".into(),
                    });
                }
                o.push('\n');
            }
        }
        o
    }

    /// The best median of `key` in `group` among the peers: rows that are
    /// not spindle's and not the reference.
    pub fn best_peer(&self, group: &str, key: &str) -> Option<f64> {
        self.series
            .iter()
            .filter(|s| s.group == group && !s.server.starts_with("spindle"))
            .filter(|s| self.reference.as_deref() != Some(s.server.as_str()))
            .filter(|s| !s.server.starts_with("fio"))
            .filter_map(|s| s.medians.get(key).copied())
            .max_by(|a, b| a.total_cmp(b))
    }

    /// The Markdown report: machine, notes, then one table per group.
    pub fn markdown(&self, columns: &[Column], higher_is_better: bool) -> String {
        let m = &self.machine;
        let mut o = format!("# {}\n\n", self.title);
        if self.smoke_test {
            o.push_str(&format!(
                "> **{SMOKE_NOTICE}** Why, for this experiment: the method line under the tables.\n\n"
            ));
        }
        o.push_str(&format!("Command: `{}`\n\n", self.command));
        o.push_str("| machine | |\n|---|---|\n");
        o.push_str(&format!("| date | {} |\n", m.date_utc));
        o.push_str(&format!("| CPU | {} × {} |\n", m.cpus, m.cpu_model));
        o.push_str(&format!("| memory | {:.1} GiB |\n", m.memory_gib));
        o.push_str(&format!("| kernel | {} |\n", m.kernel));
        o.push_str(&format!(
            "| data disk | {} ({}{}) |\n",
            m.data_device,
            m.disk_model,
            match m.rotational {
                Some(true) => ", rotational",
                Some(false) => ", non-rotational",
                None => "",
            }
        ));
        o.push_str(&format!(
            "| server memory cgroup | {} |\n",
            m.cgroup_limit.as_deref().unwrap_or("none")
        ));
        o.push_str(&format!("| TCP congestion control | {} |\n", m.tcp));
        o.push_str(&format!(
            "| load average (start, end) | {} ; {} |\n",
            m.load_average_start, m.load_average_end
        ));
        for (k, v) in &m.versions {
            o.push_str(&format!("| {k} | {v} |\n"));
        }
        o.push_str(&format!(
            "\nParameters: `{}`\n\n",
            serde_json::to_string(&self.params).unwrap_or_default()
        ));
        for n in &self.notes {
            o.push_str(&format!("- {n}\n"));
        }
        if !self.notes.is_empty() {
            o.push('\n');
        }
        let primary = columns
            .iter()
            .find(|c| c.key == self.primary)
            .unwrap_or(&columns[0]);
        for g in self.groups() {
            // A smoke test gives no ratios: its numbers are not a comparison.
            let ratios = !self.smoke_test;
            o.push_str(&format!("## {g}\n\n"));
            o.push_str(&format!("| server | {} median (min–max) |", primary.label));
            if ratios {
                o.push_str(&format!(" vs {} |", self.baseline));
                if let Some(r) = &self.reference {
                    o.push_str(&format!(" vs {r} |"));
                }
                if self.vs_best_peer {
                    o.push_str(" vs best peer |");
                }
            }
            for c in columns.iter().filter(|c| c.key != primary.key) {
                o.push_str(&format!(" {} |", c.label));
            }
            o.push_str("\n|---|---:|");
            let extra = if ratios {
                1 + usize::from(self.reference.is_some()) + usize::from(self.vs_best_peer)
            } else {
                0
            };
            for _ in 0..extra {
                o.push_str("---:|");
            }
            for _ in columns.iter().filter(|c| c.key != primary.key) {
                o.push_str("---:|");
            }
            o.push('\n');
            let base = self.median(&g, &self.baseline, primary.key);
            for s in self.series.iter().filter(|s| s.group == g) {
                let p = match stats(&s.samples, primary.key) {
                    Some((med, lo, hi)) => format!(
                        "{} ({}–{}){}",
                        fmt(med, primary.decimals),
                        fmt(lo, primary.decimals),
                        fmt(hi, primary.decimals),
                        if s.short_samples > 0 {
                            format!(" {SHORT_MARK}")
                        } else {
                            String::new()
                        }
                    ),
                    None if s.unsupported.is_some() => "– (not supported)".into(),
                    None => "failed".into(),
                };
                o.push_str(&format!("| {} | {p} |", s.server));
                let frac = |b: Option<f64>| match (s.medians.get(primary.key), b) {
                    (Some(v), Some(b)) if b > 0.0 => format!("{:.2}×", v / b),
                    _ => "–".into(),
                };
                if ratios {
                    o.push_str(&format!(" {} |", frac(base)));
                    if let Some(r) = &self.reference {
                        o.push_str(&format!(" {} |", frac(self.median(&g, r, primary.key))));
                    }
                    if self.vs_best_peer {
                        o.push_str(&format!(" {} |", frac(self.best_peer(&g, primary.key))));
                    }
                }
                for c in columns.iter().filter(|c| c.key != primary.key) {
                    let v = s
                        .medians
                        .get(c.key)
                        .map(|v| fmt(*v, c.decimals))
                        .unwrap_or_else(|| "–".into());
                    o.push_str(&format!(" {v} |"));
                }
                o.push('\n');
            }
            o.push_str(&self.short_footnote(&g));
            for s in self.series.iter().filter(|s| s.group == g) {
                let bad = s.medians.get("non_200").copied().unwrap_or(0.0);
                if bad > 0.0 {
                    o.push_str(&format!(
                        "\n- **{}: {bad:.0} of its fetches (median) were not 200 responses** (errors {:.0}, timeouts {:.0}); like http_load, fetches/sec counts every ended fetch, so its row is not comparable: it served {:.1} good fetches/sec.\n",
                        s.server,
                        s.medians.get("errors").copied().unwrap_or(0.0),
                        s.medians.get("timeouts").copied().unwrap_or(0.0),
                        s.medians.get("ok_fetches_per_sec").copied().unwrap_or(0.0)
                    ));
                }
            }
            let unsupported: Vec<String> = self
                .series
                .iter()
                .filter(|s| s.group == g)
                .filter_map(|s| {
                    Some(format!(
                        "- {}: not supported: {}\n",
                        s.server,
                        s.unsupported.as_ref()?
                    ))
                })
                .collect();
            if !unsupported.is_empty() {
                o.push('\n');
                o.push_str(&unsupported.concat());
            }
            let fails: Vec<String> = self
                .series
                .iter()
                .filter(|s| s.group == g)
                .flat_map(|s| s.failures.iter().map(move |f| format!("{}: {f}", s.server)))
                .collect();
            if !fails.is_empty() {
                o.push('\n');
                for f in fails {
                    o.push_str(&format!("- failed run: {f}\n"));
                }
            }
            o.push('\n');
        }
        let _ = higher_is_better;
        o.push_str(&format!(
            "Method: medians over {} round(s), servers interleaved in each round{}. {} A sample is too short to mean anything ({SHORT_MARK} in the tables) when it measured less than {} s or ended fewer than {} waves of fetches (fetches / -parallel): under that the spread between rounds on this machine outgrows the gaps between servers.\n",
            self.series
                .iter()
                .map(|s| s.samples.len())
                .max()
                .unwrap_or(0),
            if self.smoke_test { "" } else { "; ratios are of medians" },
            self.method,
            self.min_sample_seconds,
            self.min_waves
        ));
        for e in &self.extra_md {
            o.push('\n');
            o.push_str(e);
        }
        o
    }

    /// The note under a group's table naming its samples too short to mean
    /// anything, or nothing.
    fn short_footnote(&self, group: &str) -> String {
        let short: Vec<String> = self
            .series
            .iter()
            .filter(|s| s.group == group && s.short_samples > 0)
            .map(|s| {
                let why: Vec<String> = s.samples.iter().filter_map(|m| self.too_short(m)).collect();
                format!("{} ({})", s.server, why.join(" / "))
            })
            .collect();
        if short.is_empty() {
            return String::new();
        }
        format!(
            "\n{SHORT_MARK} too short to mean anything (under {} s or {} waves of fetches): {}.\n",
            self.min_sample_seconds,
            self.min_waves,
            short.join("; ")
        )
    }

    /// Writes NAME.json, NAME.md and NAME.svg under `out`; returns the paths.
    pub fn write(
        &self,
        out: &Path,
        name: &str,
        columns: &[Column],
        ylabel: &str,
    ) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let json = out.join(format!("{name}.json"));
        std::fs::write(&json, serde_json::to_string_pretty(self)? + "\n")?;
        let md = out.join(format!("{name}.md"));
        let mut text = self.markdown(columns, true);
        text.push_str(&format!("\n![{}]({name}.svg)\n", self.title));
        std::fs::write(&md, text)?;
        let svg = out.join(format!("{name}.svg"));
        let groups: Vec<(String, Vec<Bar>)> = self
            .groups()
            .into_iter()
            .map(|g| {
                let bars = self
                    .series
                    .iter()
                    .filter(|s| s.group == g && s.unsupported.is_none())
                    .map(|s| {
                        let (med, lo, hi) =
                            stats(&s.samples, &self.primary).unwrap_or((0.0, 0.0, 0.0));
                        Bar {
                            label: s.server.clone(),
                            median: med,
                            min: lo,
                            max: hi,
                        }
                    })
                    .collect();
                (g, bars)
            })
            .collect();
        bar_chart(&svg, &self.title, ylabel, &groups)?;
        self.announce();
        Ok(vec![json, md, svg])
    }
}

pub fn fmt(v: f64, decimals: usize) -> String {
    if decimals == 0 && v.abs() >= 10_000.0 {
        let s = format!("{:.0}", v);
        let (sign, digits) = s.strip_prefix('-').map(|d| ("-", d)).unwrap_or(("", &s));
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        return format!("{sign}{out}");
    }
    format!("{v:.decimals$}")
}

pub struct Bar {
    pub label: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Colour per server, stable across charts.
fn colour(label: &str) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    let h = label.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    let fixed = [
        "spindle-io-uring",
        "spindle-linux-sendfile",
        "spindle-posix-aio",
        "spindle-linux-aio-sendfile",
        "nginx-sendfile",
        "nginx-aio-threads",
        "lighttpd",
    ];
    match fixed.iter().position(|f| label.starts_with(f)) {
        Some(i) => PALETTE[i],
        None => PALETTE[(h % 8) as usize],
    }
}

/// Grouped bar chart: medians as bars, min–max as whiskers.
pub fn bar_chart(
    path: &Path,
    title: &str,
    ylabel: &str,
    groups: &[(String, Vec<Bar>)],
) -> Result<()> {
    use plotters::prelude::*;
    let nbars: usize = groups
        .iter()
        .map(|(_, b)| b.len() + 1)
        .sum::<usize>()
        .max(2);
    let width = (160 + nbars * 42).clamp(640, 2400) as u32;
    let ymax = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|x| x.max.max(x.median)))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let root = SVGBackend::new(path, (width, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(150)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..nbars as f64, 0f64..ymax)
        .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(ylabel)
        .draw()
        .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    let mut x = 0.5f64;
    for (g, bars) in groups {
        let gx = x;
        for b in bars {
            let c = colour(&b.label);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x, 0.0), (x + 0.8, b.median)],
                    c.filled(),
                )))
                .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x + 0.4, b.min), (x + 0.4, b.max)],
                    BLACK.stroke_width(1),
                )))
                .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
            let label_pos = chart.backend_coord(&(x + 0.25, 0.0));
            root.draw(&Text::new(
                b.label.clone(),
                (label_pos.0, label_pos.1 + 8),
                ("sans-serif", 12)
                    .into_font()
                    .transform(FontTransform::Rotate90),
            ))
            .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
            x += 1.0;
        }
        let gpos = chart.backend_coord(&(gx, 0.0));
        root.draw(&Text::new(
            g.clone(),
            (gpos.0, gpos.1 + 135),
            ("sans-serif", 13).into_font(),
        ))
        .map_err(|e| anyhow::anyhow!("svg: {e}"))?;
        x += 1.0;
    }
    root.present().map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Report, MIN_SAMPLE_SECONDS, MIN_WAVES};
    use std::collections::BTreeMap;

    fn sample(seconds: f64, waves: Option<f64>) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::from([("seconds".to_string(), seconds)]);
        if let Some(w) = waves {
            m.insert("waves".into(), w);
        }
        m
    }

    /// Either measure alone makes a sample short; a sample without `waves`
    /// is held to its seconds only.
    #[test]
    fn length_rule() {
        let r = Report::new(
            "t",
            "t",
            crate::common::Machine::probe(std::path::Path::new("/")),
            serde_json::json!({}),
        );
        let (s, w) = (MIN_SAMPLE_SECONDS, MIN_WAVES);
        assert_eq!(r.too_short(&sample(s, Some(w))), None);
        assert_eq!(r.too_short(&sample(10.0, None)), None);
        assert_eq!(
            r.too_short(&sample(0.09, Some(2.0))).as_deref(),
            Some("0.09 s, 2.0 waves")
        );
        assert_eq!(
            r.too_short(&sample(21.0, Some(2.0))).as_deref(),
            Some("2.0 waves")
        );
        assert_eq!(r.too_short(&sample(0.4, None)).as_deref(), Some("0.40 s"));
    }
}
