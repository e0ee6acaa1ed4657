//! SVG line charts of the sweeps (plotters' SVG backend, no font files).

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::Path;

/// One line: a label and (x, passes/s) points.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Where the legend goes (somewhere the lines are not).
#[derive(Debug, Clone, Copy)]
pub enum LegendAt {
    LowerLeft,
    LowerRight,
}

/// A fixed colour per model, so a model looks the same in every figure
/// (the pair route shares its model's colour and is drawn dashed).
fn colour(label: &str) -> RGBColor {
    match label.trim_end_matches("/pair") {
        "select" => RGBColor(140, 140, 140),
        "poll" => RGBColor(214, 39, 40),
        "epoll" => RGBColor(31, 119, 180),
        "epoll-et" => RGBColor(23, 190, 207),
        "aio-poll" => RGBColor(255, 127, 14),
        "uring-poll" => RGBColor(44, 160, 44),
        "uring-poll-multishot" => RGBColor(148, 103, 189),
        "uring-read" => RGBColor(140, 86, 75),
        _ => RGBColor(0, 0, 0),
    }
}

fn fmt_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Draw `series` into an SVG file at `path`. The y axis starts at zero so
/// that flat and falling lines read honestly.
pub fn draw(
    path: &Path,
    title: &str,
    subtitle: &str,
    x_label: &str,
    x_log: bool,
    series: &[Series],
    legend: LegendAt,
) -> Result<()> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut xmin, mut xmax, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in all {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        if y.is_finite() {
            ymax = ymax.max(y);
        }
    }
    if !xmin.is_finite() {
        return Err(anyhow!("nothing to plot"));
    }
    if xmax <= xmin {
        xmax = xmin + 1.0;
    }
    let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (top, body) = root.split_vertically(56);
    top.draw(&Text::new(
        title.to_string(),
        (20, 8),
        ("sans-serif", 22).into_font(),
    ))
    .map_err(|e| anyhow!("{e}"))?;
    top.draw(&Text::new(
        subtitle.to_string(),
        (20, 34),
        ("sans-serif", 14).into_font().color(&RGBColor(90, 90, 90)),
    ))
    .map_err(|e| anyhow!("{e}"))?;
    let pos = match legend {
        LegendAt::LowerLeft => SeriesLabelPosition::LowerLeft,
        LegendAt::LowerRight => SeriesLabelPosition::LowerRight,
    };
    if x_log {
        chart(
            &body,
            (xmin * 0.8..xmax * 1.25).log_scale(),
            ymax,
            x_label,
            series,
            pos,
        )
    } else {
        let pad = (xmax - xmin) * 0.03;
        chart(&body, xmin - pad..xmax + pad, ymax, x_label, series, pos)
    }?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn chart<X>(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    x: X,
    ymax: f64,
    x_label: &str,
    series: &[Series],
    pos: SeriesLabelPosition,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut c = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, 0f64..ymax)
        .map_err(|e| anyhow!("{e}"))?;
    c.configure_mesh()
        .x_desc(x_label)
        .y_desc("token passes per second")
        .y_label_formatter(&|v| fmt_count(*v))
        .x_label_formatter(&|v| fmt_count(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for s in series {
        let col = colour(&s.label);
        let dashed = s.label.ends_with("/pair");
        let anno = if dashed {
            c.draw_series(DashedLineSeries::new(
                s.points.iter().copied(),
                7,
                5,
                col.stroke_width(2),
            ))
        } else {
            c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                col.stroke_width(2),
            ))
        }
        .map_err(|e| anyhow!("{e}"))?;
        anno.label(s.label.as_str()).legend(move |(x, y)| {
            // Two segments: joined for a solid line, with a gap for dashed.
            let gap = if dashed { 4 } else { 0 };
            EmptyElement::at((x + 11, y))
                + PathElement::new(vec![(-11, 0), (-gap, 0)], col.stroke_width(2))
                + PathElement::new(vec![(gap, 0), (11, 0)], col.stroke_width(2))
        });
        if dashed {
            c.draw_series(
                s.points
                    .iter()
                    .map(|&p| TriangleMarker::new(p, 4, col.filled())),
            )
        } else {
            c.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, col.filled())))
        }
        .map_err(|e| anyhow!("{e}"))?;
    }
    c.configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
