//! Reports: JSON (every sample), Markdown (medians with min-max, ratios against the
//! baseline) and SVG bar charts (plotters).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::common::{stats, Machine};

/// The measurements of one server in one group (e.g. "keep-alive"), one sample per round.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub group: String,
    pub server: String,
    pub samples: Vec<BTreeMap<String, f64>>,
    pub medians: BTreeMap<String, f64>,
    pub failures: Vec<String>,
}

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
        }
    }

    /// Adds a sample (or a failure) to the series of (group, server).
    pub fn add(&mut self, group: &str, server: &str, sample: Result<BTreeMap<String, f64>>) {
        let idx = match self
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
                });
                self.series.len() - 1
            }
        };
        let s = &mut self.series[idx];
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
            o.push_str(&format!("## {g}\n\n"));
            o.push_str(&format!(
                "| server | {} median (min–max) | vs {} |",
                primary.label, self.baseline
            ));
            if let Some(r) = &self.reference {
                o.push_str(&format!(" vs {r} |"));
            }
            if self.vs_best_peer {
                o.push_str(" vs best peer |");
            }
            for c in columns.iter().filter(|c| c.key != primary.key) {
                o.push_str(&format!(" {} |", c.label));
            }
            o.push_str("\n|---|---:|---:|");
            let extra = usize::from(self.reference.is_some()) + usize::from(self.vs_best_peer);
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
                        "{} ({}–{})",
                        fmt(med, primary.decimals),
                        fmt(lo, primary.decimals),
                        fmt(hi, primary.decimals)
                    ),
                    None => "failed".into(),
                };
                let ratio = match (s.medians.get(primary.key), base) {
                    (Some(v), Some(b)) if b > 0.0 => format!("{:.2}×", v / b),
                    _ => "–".into(),
                };
                o.push_str(&format!("| {} | {p} | {ratio} |", s.server));
                let frac = |b: Option<f64>| match (s.medians.get(primary.key), b) {
                    (Some(v), Some(b)) if b > 0.0 => format!("{:.2}×", v / b),
                    _ => "–".into(),
                };
                if let Some(r) = &self.reference {
                    o.push_str(&format!(" {} |", frac(self.median(&g, r, primary.key))));
                }
                if self.vs_best_peer {
                    o.push_str(&format!(" {} |", frac(self.best_peer(&g, primary.key))));
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
            "Medians over {} round(s), servers interleaved in each round; ratios are of medians.\n",
            self.series
                .iter()
                .map(|s| s.samples.len())
                .max()
                .unwrap_or(0)
        ));
        for e in &self.extra_md {
            o.push('\n');
            o.push_str(e);
        }
        o
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
                    .filter(|s| s.group == g)
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
