//! The Prometheus text format 0.0.4 ("classic"), made from the OpenMetrics text that
//! `prometheus-client` writes, for a scraper or a tool that does not ask for OpenMetrics
//! (`promtool check metrics`, `curl`). The two differ in a few rules only, applied here:
//! - a counter's `# HELP` and `# TYPE` name its samples' name, `<family>_total`;
//! - an info family is a gauge named `<family>_info`;
//! - a family of any other OpenMetrics-only type (`stateset`, `gaugehistogram`, `unknown`) is
//!   `untyped`, keeping its samples;
//! - `# UNIT` lines, `_created` samples, exemplars (` # {...}` after a value) and `# EOF` go.

use std::collections::BTreeMap;

/// `openmetrics` in the text format 0.0.4.
pub fn from_openmetrics(openmetrics: &str) -> String {
    let mut types: BTreeMap<&str, &str> = BTreeMap::new();
    for line in openmetrics.lines() {
        if let Some((name, kind)) = comment(line, "TYPE") {
            types.insert(name, kind);
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        let kept = if let Some((name, text)) = comment(line, "HELP") {
            let (name, _) = classic_family(name, types.get(name).copied());
            Some(format!("# HELP {name} {text}"))
        } else if let Some((name, kind)) = comment(line, "TYPE") {
            let (name, kind) = classic_family(name, Some(kind));
            Some(format!("# TYPE {name} {kind}"))
        } else if line.starts_with('#') {
            None
        } else {
            sample(line, &types).map(str::to_string)
        };
        if let Some(kept) = kept {
            out.push_str(&kept);
            out.push('\n');
        }
    }
    out
}

/// The name and the rest of a `# <keyword> <name> <rest>` line.
fn comment<'a>(line: &'a str, keyword: &str) -> Option<(&'a str, &'a str)> {
    let rest = line
        .strip_prefix("# ")?
        .strip_prefix(keyword)?
        .strip_prefix(' ')?;
    Some(rest.split_once(' ').unwrap_or((rest, "")))
}

/// A family's name and type in the format 0.0.4.
fn classic_family(name: &str, kind: Option<&str>) -> (String, &'static str) {
    match kind {
        Some("counter") => (format!("{name}_total"), "counter"),
        Some("info") => (format!("{name}_info"), "gauge"),
        Some("gauge") => (name.to_string(), "gauge"),
        Some("histogram") => (name.to_string(), "histogram"),
        Some("summary") => (name.to_string(), "summary"),
        _ => (name.to_string(), "untyped"),
    }
}

/// The sample `line` without its exemplar, or `None` for a `_created` sample of a family that
/// has one in OpenMetrics.
fn sample<'a>(line: &'a str, types: &BTreeMap<&str, &str>) -> Option<&'a str> {
    if line.trim().is_empty() {
        return None;
    }
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    if let Some(family) = line[..name_end].strip_suffix("_created")
        && matches!(
            types.get(family).copied(),
            Some("counter" | "histogram" | "summary")
        )
    {
        return None;
    }
    // An exemplar follows the value after " # ", outside the labels' quotes.
    let labels_end = match line[name_end..].starts_with('{') {
        true => closing_brace(line, name_end).unwrap_or(line.len()),
        false => name_end,
    };
    Some(match line[labels_end..].find(" # ") {
        Some(at) => &line[..labels_end + at],
        None => line,
    })
}

/// The index after the `}` that closes the label set opening at `open`, skipping quoted values.
fn closing_brace(line: &str, open: usize) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(open + i + 1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_info_and_openmetrics_only_lines_become_the_classic_format() {
        let openmetrics = "\
# HELP zkcron_fires Ticks fired.
# TYPE zkcron_fires counter
zkcron_fires_total{task=\"a # b}\",outcome=\"success\"} 3 # {trace=\"x\"} 1.0
zkcron_fires_created{task=\"a\"} 1700000000.0
# HELP zkcron_lateness_seconds Lateness.
# TYPE zkcron_lateness_seconds histogram
# UNIT zkcron_lateness_seconds seconds
zkcron_lateness_seconds_sum 1.5
zkcron_lateness_seconds_count 2
zkcron_lateness_seconds_bucket{le=\"+Inf\"} 2
# HELP zkcron_build The build.
# TYPE zkcron_build info
zkcron_build_info{version=\"1.0.0\"} 1
# HELP zkcron_odd An odd one.
# TYPE zkcron_odd stateset
zkcron_odd{zkcron_odd=\"a\"} 1
# EOF
";
        assert_eq!(
            from_openmetrics(openmetrics),
            "\
# HELP zkcron_fires_total Ticks fired.
# TYPE zkcron_fires_total counter
zkcron_fires_total{task=\"a # b}\",outcome=\"success\"} 3
# HELP zkcron_lateness_seconds Lateness.
# TYPE zkcron_lateness_seconds histogram
zkcron_lateness_seconds_sum 1.5
zkcron_lateness_seconds_count 2
zkcron_lateness_seconds_bucket{le=\"+Inf\"} 2
# HELP zkcron_build_info The build.
# TYPE zkcron_build_info gauge
zkcron_build_info{version=\"1.0.0\"} 1
# HELP zkcron_odd An odd one.
# TYPE zkcron_odd untyped
zkcron_odd{zkcron_odd=\"a\"} 1
"
        );
    }

    /// Regression: `promtool check metrics` on /metrics flagged 8 counters with "no help
    /// text": their samples (`<family>_total`) had no `# HELP` of their own name. Every sample
    /// of the real encoding now belongs to a family with a `# HELP` and a `# TYPE`.
    #[test]
    fn every_sample_of_the_daemons_metrics_has_help_and_type_of_its_family() {
        let metrics = super::super::Metrics::new();
        metrics.task_loaded(&"backup".into());
        metrics.fired("backup", super::super::FireOutcome::Success);
        let classic = from_openmetrics(&metrics.encode());
        let mut helped = std::collections::BTreeSet::new();
        let mut typed = BTreeMap::new();
        for line in classic.lines() {
            if let Some((name, _)) = comment(line, "HELP") {
                helped.insert(name.to_string());
            } else if let Some((name, kind)) = comment(line, "TYPE") {
                typed.insert(name.to_string(), kind.to_string());
            }
        }
        let mut samples = 0;
        for line in classic.lines().filter(|l| !l.starts_with('#')) {
            let name = &line[..line.find(['{', ' ']).unwrap()];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
                .unwrap_or(name);
            assert!(
                typed.contains_key(family) && helped.contains(family),
                "{name}: no family with HELP and TYPE in\n{classic}"
            );
            samples += 1;
        }
        assert!(samples > 10, "{classic}");
        assert!(typed["zkcron_fires_total"] == "counter", "{classic}");
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
    }
}
