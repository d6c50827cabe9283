//! The chart of a task's recent runs on its page: each run's duration and lateness (start
//! minus tick) as two lines, in inline SVG drawn on the server (no script, no library). Its
//! numbers are also in the history table beside it, for screen readers and for JS off.

use maud::{Markup, html};

use crate::coord::records::HistoryEntry;

/// The most runs drawn (the newest).
pub const CHART_RUNS: usize = 50;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 160.0;
const PAD: f64 = 30.0;

/// A run's lateness in seconds: how long after its tick it started (manual runs: after the
/// request).
pub fn lateness_s(run: &HistoryEntry) -> f64 {
    ((run.started_at - run.tick).num_milliseconds() as f64 / 1000.0).max(0.0)
}

/// The points of one series, oldest left, scaled to `max`.
fn points(values: &[f64], max: f64) -> String {
    let n = values.len().max(2) - 1;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = PAD + (WIDTH - 2.0 * PAD) * i as f64 / n as f64;
            let y = HEIGHT - PAD - (HEIGHT - 2.0 * PAD) * (v / max);
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The chart of `runs` (newest first, as the history lists them); nothing without runs.
pub fn chart(runs: &[HistoryEntry]) -> Markup {
    let mut recent: Vec<&HistoryEntry> = runs.iter().take(CHART_RUNS).collect();
    if recent.is_empty() {
        return html! {};
    }
    recent.reverse();
    let durations: Vec<f64> = recent
        .iter()
        .map(|r| r.duration_ms as f64 / 1000.0)
        .collect();
    let lateness: Vec<f64> = recent.iter().map(|r| lateness_s(r)).collect();
    let max = durations
        .iter()
        .chain(&lateness)
        .fold(0.001_f64, |m, v| m.max(*v));
    let title = format!(
        "Duration and lateness of the last {} runs, oldest left; the top of the scale is {max:.3} s",
        recent.len()
    );
    html! {
        figure.chart {
            svg role="img" aria-label=(title) viewBox={"0 0 " (WIDTH) " " (HEIGHT)}
                xmlns="http://www.w3.org/2000/svg" {
                title { (title) }
                line.axis x1=(PAD) y1=(HEIGHT - PAD) x2=(WIDTH - PAD) y2=(HEIGHT - PAD) {}
                line.axis x1=(PAD) y1=(PAD) x2=(PAD) y2=(HEIGHT - PAD) {}
                text x="2" y=(PAD) { (format!("{max:.2}s")) }
                text x="2" y=(HEIGHT - PAD) { "0" }
                polyline.duration points=(points(&durations, max)) {}
                polyline.lateness points=(points(&lateness, max)) {}
            }
            figcaption {
                span.key-duration { "— duration" } " "
                span.key-lateness { "— lateness (start minus tick)" }
            }
        }
    }
}
