//! `tailstream bench plot`: turns the JSON-lines reports written by `tailstream bench ... --json`
//! into SVG figures for the docs.
//!
//! Each input line is one report. Produce reports (they have `records_per_sec`) feed four
//! figures: throughput vs producers, throughput and broker CPU vs replication factor, backup
//! CPU split into user and system time, and latency percentiles vs offered load (open-loop
//! runs, the ones with a `rate`). Recovery reports (they have a `runs` array) feed recovery
//! time vs data size. A report missing a field a figure needs is left out of that figure only;
//! a figure no report fits is skipped with a note on stderr. Reports that land on the same
//! point (same line, same x) are averaged, so repeated runs can simply be appended to a file.
//!
//! Drawing uses `plotters`' SVG backend, which writes text as `<text>` elements: no font
//! library is needed, and the figures stay small and diffable.

mod draw;

use draw::write_figure;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct PlotArgs {
    /// JSON-lines files written by `tailstream bench ... --json` (one report per line; blank lines and lines starting with '#' are skipped).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Directory to write the SVG figures into (created if missing).
    #[arg(long, default_value = "docs/figures")]
    pub out: PathBuf,
}

const HEIGHT: u32 = 500;
const MIB: f64 = 1_048_576.0;

/// How a line is drawn: (dash, gap) in pixels, None for solid. Plotters dashes in pixel
/// space, so dashes look even on a log axis too; dots are dashes as long as the line is wide.
/// The latency percentiles of one configuration share a colour and differ by dash.
type Dash = Option<(i32, i32)>;
const SOLID: Dash = None;
const DASHED: Dash = Some((8, 5));
const DOTTED: Dash = Some((2, 4));

/// One labelled line of a chart, its points sorted by x.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    colour: usize,
    dash: Dash,
    label: String,
    points: Vec<(f64, f64)>,
}

/// Colour first, so a line can take its colour from the label it then moves in.
fn series(colour: usize, dash: Dash, label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
    let label = label.into();
    Series {
        colour,
        dash,
        label,
        points,
    }
}

#[derive(Debug)]
struct Panel {
    caption: String,
    axes: [&'static str; 2],
    log_y: bool,
    /// Legend in the upper right, for lines that fall to the right (upper left otherwise).
    legend_right: bool,
    series: Vec<Series>,
}

fn panel(caption: String, axes: [&'static str; 2], series: Vec<Series>) -> Panel {
    Panel {
        caption,
        axes,
        log_y: false,
        legend_right: false,
        series,
    }
}

/// A figure's width and panels; None when no panel has a point to draw.
type Figure = Option<(u32, Vec<Panel>)>;

fn figure(width: u32, mut panels: Vec<Panel>) -> Figure {
    for panel in &mut panels {
        panel.series.retain(|s| !s.points.is_empty());
    }
    let any = panels.iter().any(|p| !p.series.is_empty());
    any.then_some((width, panels))
}

/// Reads the reports, writes every figure that some report fits into `args.out`, and prints
/// the path of each figure written.
pub fn run(args: PlotArgs) -> Result<(), String> {
    let mut reports = Vec::new();
    for path in &args.inputs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        reports.extend(parse_lines(&path.display().to_string(), &text)?);
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let (mut closed, mut open, mut recovery) = (Vec::new(), Vec::new(), Vec::new());
    for r in &reports {
        if r.get("runs").is_some_and(Value::is_array) {
            recovery.push(r);
        } else if r.get("records_per_sec").is_some() {
            // Closed-loop runs have no offered rate; open-loop runs have a number there.
            match r.get("rate").filter(|rate| !rate.is_null()) {
                None => closed.push(r),
                Some(rate) if rate.is_number() => open.push(r),
                Some(_) => {}
            }
        }
    }
    let figures = [
        ("throughput-vs-producers.svg", throughput_figure(&closed)),
        ("replication.svg", replication_figure(&closed)),
        ("backup-cpu.svg", backup_cpu_figure(&closed)),
        ("latency-vs-load.svg", latency_figure(&open)),
        ("recovery-vs-size.svg", recovery_figure(&recovery)),
    ];
    for (file, figure) in figures {
        let Some((width, panels)) = figure else {
            eprintln!("bench plot: no report fits {file}; skipped");
            continue;
        };
        let path = args.out.join(file);
        write_figure(&path, width, &panels).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// Parses one JSON object per line; `name` is only for error messages.
fn parse_lines(name: &str, text: &str) -> Result<Vec<Value>, String> {
    let mut reports = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (i, line) = (i + 1, line.trim());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let report: Value = serde_json::from_str(line).map_err(|e| format!("{name}:{i}: {e}"))?;
        if !report.is_object() {
            return Err(format!("{name}:{i}: not a JSON object"));
        }
        reports.push(report);
    }
    Ok(reports)
}

fn num(r: &Value, key: &str) -> Option<f64> {
    r.get(key)?.as_f64().filter(|v| v.is_finite())
}

fn int(r: &Value, key: &str) -> Option<u64> {
    r.get(key)?.as_u64()
}

fn text(r: &Value, key: &str) -> Option<String> {
    r.get(key)?.as_str().map(str::to_owned)
}

fn msg(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Groups `(line, x, y)` samples into one line per key, sorted by x, averaging the samples
/// that share an x (repeated runs of one configuration).
fn group_mean<K: Ord>(
    samples: impl IntoIterator<Item = (K, f64, f64)>,
) -> BTreeMap<K, Vec<(f64, f64)>> {
    let mut groups: BTreeMap<K, Vec<(f64, f64)>> = BTreeMap::new();
    for (key, x, y) in samples {
        groups.entry(key).or_default().push((x, y));
    }
    for points in groups.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64, u32)> = Vec::new();
        for &(x, y) in points.iter() {
            match merged.last_mut() {
                // Running mean of the samples at this x.
                Some((mx, my, n)) if mx.total_cmp(&x).is_eq() => {
                    *n += 1;
                    *my += (y - *my) / f64::from(*n);
                }
                _ => merged.push((x, y, 1)),
            }
        }
        *points = merged.into_iter().map(|(x, y, _)| (x, y)).collect();
    }
    groups
}

/// One line per replication mode, x = R. An R = 0 report has no replication at all, so it is
/// the common starting point of every mode's line.
fn replication_lines(
    reports: &[&Value],
    y: impl Fn(&Value) -> Option<f64>,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let replicated = with_replicas(reports, |n| n > 0);
    let mut modes: BTreeSet<String> = replicated
        .iter()
        .filter_map(|r| text(r, "replication"))
        .collect();
    if modes.is_empty() {
        modes = BTreeSet::from(["one-sided".to_owned(), "rpc".to_owned()]);
    }
    let mut samples = Vec::new();
    for &r in reports {
        let (Some(replicas), Some(value)) = (int(r, "replicas"), y(r)) else {
            continue;
        };
        if replicas == 0 {
            samples.extend(modes.iter().map(|m| (m.clone(), 0.0, value)));
        } else if let Some(mode) = text(r, "replication") {
            samples.push((mode, replicas as f64, value));
        }
    }
    group_mean(samples)
}

fn with_replicas<'a>(reports: &[&'a Value], keep: impl Fn(u64) -> bool) -> Vec<&'a Value> {
    let kept = reports
        .iter()
        .filter(|r| int(r, "replicas").is_some_and(&keep));
    kept.copied().collect()
}

/// Keeps a mode's colour the same in every figure.
fn mode_colour(mode: &str) -> usize {
    ["one-sided", "rpc"]
        .iter()
        .position(|m| *m == mode)
        .unwrap_or(2)
}

/// The settings all reports of a figure share, for its caption (", 100 B records, Q = 4").
/// A setting that varies between reports is left out rather than misreported.
fn shared_note(reports: &[&Value], settings: &[(&str, &str)]) -> String {
    let mut note = String::new();
    for (field, template) in settings {
        let values: BTreeSet<u64> = reports.iter().filter_map(|r| int(r, field)).collect();
        if let (1, Some(v)) = (values.len(), values.first()) {
            note.push_str(&template.replace('#', &v.to_string()));
        }
    }
    note
}

const SIZE: (&str, &str) = ("record_bytes", ", # B records");
const LOGS: (&str, &str) = ("logs", ", Q = #");
const PRODUCERS: (&str, &str) = ("producers", ", # producers");

fn throughput_figure(closed: &[&Value]) -> Figure {
    let reports = with_replicas(closed, |n| n == 0);
    let samples = reports.iter().filter_map(|r| {
        let y = num(r, "records_per_sec")? / 1e6;
        Some((int(r, "logs")?, num(r, "producers")?, y))
    });
    let lines = group_mean(samples).into_iter().enumerate();
    let lines = lines.map(|(i, (q, points))| series(i, SOLID, format!("Q = {q}"), points));
    let caption = format!(
        "Produce throughput, R = 0{}",
        shared_note(&reports, &[SIZE])
    );
    let axes = ["producers", "M records/s"];
    figure(800, vec![panel(caption, axes, lines.collect())])
}

fn replication_figure(closed: &[&Value]) -> Figure {
    let mode_lines = |lines: BTreeMap<String, Vec<(f64, f64)>>| -> Vec<Series> {
        let line = |(mode, points): (String, _)| series(mode_colour(&mode), SOLID, mode, points);
        lines.into_iter().map(line).collect()
    };
    let throughput = |r: &Value| Some(num(r, "records_per_sec")? / 1e6);
    let left = mode_lines(replication_lines(closed, throughput));
    let mut right = mode_lines(replication_lines(closed, |r| num(r, "cpu_seconds_per_gib")));
    // What the kernel alone costs per GiB moved (no Tailstream work): the bar to compare with.
    let floor = closed.iter().filter_map(|r| {
        let cpu = num(r, "floor_cpu_seconds_per_gib")?;
        Some(("kernel floor", num(r, "replicas")?, cpu))
    });
    for (label, points) in group_mean(floor) {
        right.push(series(6, DASHED, label, points));
    }
    let note = shared_note(closed, &[SIZE, LOGS, PRODUCERS]);
    let caption = format!("Throughput vs replication{note}");
    let mut left = panel(caption, ["replicas R", "M records/s"], left);
    left.legend_right = true;
    let cpu = ["replicas R", "broker CPU s/GiB"];
    let right = panel("Broker CPU vs replication".to_owned(), cpu, right);
    figure(1200, vec![left, right])
}

fn backup_cpu_figure(closed: &[&Value]) -> Figure {
    let replicated = with_replicas(closed, |n| n > 0);
    // Keyed by (mode, user/system) so the legend reads one-sided user, one-sided system, rpc ...
    let mut keyed = Vec::new();
    // The third kind is one-sided mode's software NIC threads alone (user time): what the
    // writes themselves cost, apart from closing and flushing replicas.
    let kinds = [
        (0, "user", SOLID),
        (1, "system", DASHED),
        (2, "nic_user", DOTTED),
    ];
    for (kind, what, dash) in kinds {
        let field = format!("backup_{what}_cpu_seconds_per_gib");
        let samples = replicated.iter().filter_map(|r| {
            let y = num(r, &field)?;
            Some((text(r, "replication")?, num(r, "replicas")?, y))
        });
        for (mode, points) in group_mean(samples) {
            // System time gets the mode's colour shifted past the three mode colours.
            let key = (mode_colour(&mode), kind);
            let label = format!("{mode} {}", what.replace('_', " threads "));
            keyed.push((key, series(key.0 + 3 * kind, dash, label, points)));
        }
    }
    keyed.sort_by_key(|(key, _)| *key);
    let lines = keyed.into_iter().map(|(_, s)| s).collect();
    let note = shared_note(&replicated, &[SIZE, LOGS]);
    let caption = format!("Backup CPU per GiB (per backup){note}");
    figure(
        800,
        vec![panel(caption, ["replicas R", "backup CPU s/GiB"], lines)],
    )
}

/// (R, "R=3 one-sided"), or (0, "R=0") as there is no replication to name; sorts by R first.
fn config_key(r: &Value) -> Option<(u64, String)> {
    match int(r, "replicas")? {
        0 => Some((0, "R=0".to_owned())),
        n => Some((n, format!("R={n} {}", text(r, "replication")?))),
    }
}

fn latency_figure(open: &[&Value]) -> Figure {
    const PERCENTILES: [(&str, &str, Dash); 3] = [
        ("p50_us", "p50", SOLID),
        ("p99_us", "p99", DASHED),
        ("p999_us", "p99.9", DOTTED),
    ];
    let per_percentile: Vec<_> = PERCENTILES
        .iter()
        .map(|(field, _, _)| {
            group_mean(open.iter().filter_map(|r| {
                let x = num(r, "records_per_sec").or_else(|| num(r, "rate"))? / 1e3;
                // A log axis cannot show 0 µs.
                Some((config_key(r)?, x, num(r, field).filter(|us| *us > 0.0)?))
            }))
        })
        .collect();
    let configs: BTreeSet<&(u64, String)> = per_percentile.iter().flat_map(|g| g.keys()).collect();
    let mut lines = Vec::new();
    for (colour, key) in configs.into_iter().enumerate() {
        for ((_, pct, dash), groups) in PERCENTILES.iter().zip(&per_percentile) {
            if let Some(points) = groups.get(key) {
                let label = format!("{} {pct}", key.1);
                lines.push(series(colour, *dash, label, points.clone()));
            }
        }
    }
    let note = shared_note(open, &[SIZE, LOGS, PRODUCERS]);
    let caption = format!("Record latency vs offered load{note}");
    let axes = ["achieved load (k records/s)", "latency (µs, log scale)"];
    let mut chart = panel(caption, axes, lines);
    chart.log_y = true;
    figure(800, vec![chart])
}

fn recovery_figure(recovery: &[&Value]) -> Figure {
    const QUANTITIES: [(&str, &str); 3] = [
        ("kill_to_serving_ms", "kill to serving"),
        ("recovery_ms", "declared to serving"),
        ("rereplicate_ms", "re-replication"),
    ];
    let mut samples = Vec::new();
    for r in recovery {
        let runs = r.get("runs").and_then(Value::as_array);
        let (Some(records), Some(bytes), Some(runs)) =
            (num(r, "records"), num(r, "record_bytes"), runs)
        else {
            continue;
        };
        for (i, (field, _)) in QUANTITIES.iter().enumerate() {
            // Null phases (nothing to re-replicate, say) are skipped, not counted as 0.
            let ms: Vec<f64> = runs.iter().filter_map(|run| num(run, field)).collect();
            if !ms.is_empty() {
                let seconds = ms.iter().sum::<f64>() / ms.len() as f64 / 1e3;
                samples.push((i, records * bytes / MIB, seconds));
            }
        }
    }
    let lines = group_mean(samples).into_iter();
    let lines = lines.map(|(i, points)| series(i, SOLID, QUANTITIES[i].1, points));
    let note = shared_note(recovery, &[("replicas", ", R = #"), LOGS, SIZE]);
    let caption = format!("Recovery time vs data size{note}");
    let axes = ["data in the streamlet (MiB)", "seconds"];
    figure(800, vec![panel(caption, axes, lines.collect())])
}

#[cfg(test)]
mod tests {
    use super::draw::{linear_range, log_range};
    use super::*;

    #[test]
    fn group_mean_averages_shared_x_and_ranges_never_empty() {
        let groups = group_mean([(4, 2.0, 10.0), (1, 1.0, 5.0), (4, 1.0, 3.0), (4, 2.0, 20.0)]);
        assert_eq!(groups[&4], vec![(1.0, 3.0), (2.0, 15.0)]);
        assert_eq!(groups[&1], vec![(1.0, 5.0)]);
        assert_eq!(linear_range(std::iter::empty()), 0.0..1.0);
        let decade = log_range([250.0].into_iter());
        assert!((decade.start - 100.0).abs() < 1e-9 && (decade.end - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn replication_zero_starts_every_mode() {
        let text = r#"
            # a comment, then a blank line

            {"records_per_sec": 2e6, "replicas": 0}
            {"records_per_sec": 1e6, "replicas": 2, "replication": "one-sided"}
            {"records_per_sec": 1e6, "replicas": 2, "replication": "rpc"}
            {"records_per_sec": 2e6, "replicas": 2, "replication": "rpc"}
            {"records_per_sec": 9e5, "replication": "rpc"}
        "#;
        let reports = parse_lines("test", text).expect("valid lines");
        let refs: Vec<&Value> = reports.iter().collect();
        let lines = replication_lines(&refs, |r| Some(num(r, "records_per_sec")? / 1e6));
        assert_eq!(lines["one-sided"], vec![(0.0, 2.0), (2.0, 1.0)]);
        assert_eq!(lines["rpc"], vec![(0.0, 2.0), (2.0, 1.5)]);
        let err = parse_lines("f.jsonl", "{}\n[1]\n").expect_err("not an object");
        assert!(err.starts_with("f.jsonl:2:"), "{err}");
    }

    #[test]
    fn writes_every_figure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("bench.jsonl");
        let lines = [
            r#"{"producers":1,"record_bytes":100,"logs":4,"replicas":0,"records_per_sec":1e6,"cpu_seconds_per_gib":2}"#,
            r#"{"producers":2,"record_bytes":100,"logs":4,"replicas":0,"records_per_sec":2e6,"rate":null}"#,
            r#"{"producers":2,"logs":4,"replicas":2,"replication":"rpc","records_per_sec":1e6,"cpu_seconds_per_gib":5,"floor_cpu_seconds_per_gib":1,"backup_user_cpu_seconds_per_gib":0.5,"backup_system_cpu_seconds_per_gib":1.5}"#,
            r#"{"replicas":0,"records_per_sec":5e4,"rate":5e4,"records_per_sec":4.9e4,"p50_us":80,"p99_us":300,"p999_us":900}"#,
            r#"{"records":1000000,"record_bytes":100,"runs":[{"kill_to_serving_ms":900,"recovery_ms":400,"rereplicate_ms":null}]}"#,
        ];
        std::fs::write(&input, lines.join("\n")).expect("write input");
        let out = dir.path().join("figures");
        let inputs = vec![input];
        run(PlotArgs {
            inputs,
            out: out.clone(),
        })
        .expect("plot");
        assert_eq!(std::fs::read_dir(&out).expect("out dir").count(), 5);
        let svg = std::fs::read_to_string(out.join("latency-vs-load.svg")).expect("written");
        assert!(svg.contains("<text"), "{svg}");
    }
}
