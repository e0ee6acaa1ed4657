//! SVG line charts: one line per mode, message size (log scale) on x.

use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;

/// One line of a chart: label and (message size, value) points.
pub struct Line {
    pub label: String,
    pub points: Vec<(usize, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Human label of a byte size: 512, 4K, 1M.
pub fn size_label(n: usize) -> String {
    if n >= 1 << 20 && n & ((1 << 20) - 1) == 0 {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n & ((1 << 10) - 1) == 0 {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

/// Where the legend goes: where the lines are not.
#[derive(Clone, Copy, Debug)]
pub enum Legend {
    UpperLeft,
    UpperRight,
}

fn y_label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Draws `lines` into the SVG file `path`, with log scales on both axes.
pub fn chart(
    path: &Path,
    title: &str,
    y_label_text: &str,
    lines: &[Line],
    legend: Legend,
) -> anyhow::Result<()> {
    let xs: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| (p.0 as f64).log2()))
        .collect();
    let (xmin, xmax) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if xs.is_empty() {
        return Ok(());
    }
    let ys: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let ymax = ys.iter().copied().fold(0.0f64, f64::max);
    let ymin = ys.iter().copied().fold(f64::MAX, f64::min);
    let (ymin, ymax) = if ys.is_empty() {
        (0.1, 1.0)
    } else {
        (ymin / 1.5, ymax * 1.5)
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).context("drawing")?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((xmin - 0.3)..(xmax + 0.3), (ymin..ymax).log_scale())
        .context("building the chart")?;
    c.configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_label_text)
        .light_line_style(WHITE)
        .y_label_formatter(&|v| y_label(*v))
        .x_labels(((xmax - xmin) as usize + 1).min(24))
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 0.01 && r >= 0.0 {
                size_label(1usize << r as u32)
            } else {
                String::new()
            }
        })
        .draw()
        .context("drawing the mesh")?;
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = l
            .points
            .iter()
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .map(|&(s, v)| ((s as f64).log2(), v))
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .context("drawing a line")?
            .label(l.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .context("drawing points")?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(match legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
        })
        .draw()
        .context("drawing the legend")?;
    root.present().context("writing the SVG")?;
    Ok(())
}
