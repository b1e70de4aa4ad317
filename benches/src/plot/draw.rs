//! Drawing a figure's panels with `plotters` (SVG): colours, axis ranges, ticks, lines.

use super::{HEIGHT, Panel, msg};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::series::DashedLineSeries;
use std::ops::Range;
use std::path::Path;

/// Palette99 with the colours that are hard to see on white (yellow, cyan, pale ones) left out.
fn colour(i: usize) -> RGBColor {
    const ORDER: [usize; 10] = [3, 0, 1, 4, 5, 10, 12, 14, 7, 16];
    let (r, g, b) = Palette99::COLORS[ORDER[i % ORDER.len()] % Palette99::COLORS.len()];
    RGBColor(r, g, b)
}

/// A linear axis from 0 (or below, for negative data) with 10% headroom; 0..1 when there is
/// nothing or only zeros, so plotters never gets an empty range.
pub(super) fn linear_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values.fold((0.0_f64, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi > lo {
        lo * 1.1..hi * 1.1
    } else {
        0.0..1.0
    }
}

/// A log axis rounded out to whole decades (so both ends get a labelled tick), at least one
/// decade wide; values that are not positive cannot be shown and are ignored.
pub(super) fn log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let positive: Vec<f64> = values.filter(|v| *v > 0.0).collect();
    if positive.is_empty() {
        return 1.0..10.0;
    }
    let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = positive.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    );
    if hi > lo { lo..hi } else { lo..lo * 10.0 }
}

/// Tick labels without float noise: "0.3", not "0.30000000000000004"; "2000", not "2000.0".
fn tick(v: &f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

pub(super) fn write_figure(path: &Path, width: u32, panels: &[Panel]) -> Result<(), String> {
    let root = SVGBackend::new(path, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(msg)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    // Explicitly, because an error in the implicit present at drop would be lost.
    root.present().map_err(msg)
}

/// Draws mesh, lines and legend onto a built chart. A macro rather than a function because
/// the linear and the log chart have different coordinate types, and spelling plotters' trait
/// bounds for both would take more lines than this does.
macro_rules! draw_chart {
    ($chart:expr, $panel:expr) => {{
        let (chart, panel): (_, &Panel) = (&mut $chart, $panel);
        {
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(panel.axes[0]).y_desc(panel.axes[1]);
            mesh.x_label_formatter(&tick).y_label_formatter(&tick);
            mesh.draw().map_err(msg)?;
        }
        for s in &panel.series {
            let style = colour(s.colour).stroke_width(2);
            let points = s.points.iter().copied();
            let anno = match s.dash {
                None => {
                    let line = LineSeries::new(points, style.filled()).point_size(3);
                    chart.draw_series(line).map_err(msg)?
                }
                Some((dash, gap)) => {
                    // Dashes hide where the points are; small dots show them.
                    let marks = points.clone().map(|p| Circle::new(p, 2, style.filled()));
                    chart.draw_series(marks).map_err(msg)?;
                    let line = DashedLineSeries::new(points, dash, gap, style);
                    chart.draw_series(line).map_err(msg)?
                }
            };
            // A solid legend sample is one dash as long as the sample.
            let (dash, gap) = s.dash.unwrap_or((20, 20));
            anno.label(s.label.as_str()).legend(move |(x, y)| {
                DashedPathElement::new(vec![(x, y), (x + 20, y)], dash, gap, style)
            });
        }
        if !panel.series.is_empty() {
            let mut legend = chart.configure_series_labels();
            legend.position(if panel.legend_right {
                SeriesLabelPosition::UpperRight
            } else {
                SeriesLabelPosition::UpperLeft
            });
            legend.background_style(WHITE.mix(0.85)).border_style(BLACK);
            legend.draw().map_err(msg)?;
        }
    }};
}

fn draw_panel(area: &DrawingArea<SVGBackend<'_>, Shift>, panel: &Panel) -> Result<(), String> {
    let points = || panel.series.iter().flat_map(|s| s.points.iter().copied());
    let x = linear_range(points().map(|p| p.0));
    let mut builder = ChartBuilder::on(area);
    let font = ("sans-serif", 20).into_font();
    builder.caption(panel.caption.as_str(), font).margin(15);
    builder.x_label_area_size(45).y_label_area_size(70);
    if panel.log_y {
        let y = log_range(points().map(|p| p.1)).log_scale();
        let mut chart = builder.build_cartesian_2d(x, y).map_err(msg)?;
        draw_chart!(chart, panel);
    } else {
        let y = linear_range(points().map(|p| p.1));
        let mut chart = builder.build_cartesian_2d(x, y).map_err(msg)?;
        draw_chart!(chart, panel);
    }
    Ok(())
}
