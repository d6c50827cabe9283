//! Why a member may not own a task, in the words the node's log, `zkcron status` and `zkcron
//! explain` share: one wording, so the operator reads the same sentence everywhere.

use std::collections::BTreeMap;

use super::{Member, TaskEntry};

/// Why `member`, whose definition of the task is `entry` (`None`: it does not define it), may
/// not own it, or `None` when it may. The first rule it fails: drained, may not lead (clock),
/// not defining it, `version_req`, `require_labels`.
pub fn why_ineligible(member: &Member, entry: Option<&TaskEntry>) -> Option<String> {
    if member.drained {
        return Some("drained".into());
    }
    if !member.may_lead {
        return Some("may not lead (clock too far off ZooKeeper's)".into());
    }
    let Some(entry) = entry else {
        return Some("does not define the task".into());
    };
    if let Some(req) = entry
        .version_req
        .as_ref()
        .filter(|req| !req.matches(&member.release))
    {
        return Some(format!(
            "release {} does not match version_req {req}",
            member.release
        ));
    }
    if !entry.labels_match(&member.labels) {
        return Some(format!(
            "labels ({}) lack require_labels {}",
            label_pairs(&member.labels),
            label_pairs(&entry.require_labels)
        ));
    }
    None
}

/// Why none of `defining` (the live members that define a task, with their definitions, in
/// the order to name them) may own it: each member under the first rule it fails, grouped by
/// rule and requirement, e.g. `version_req >=2.0 matches none of a (1.0.0), b (1.0.0); c is
/// drained`.
pub fn why_none_eligible(defining: &[(&Member, &TaskEntry)]) -> String {
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut labels: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut drained = Vec::new();
    let mut refusing = Vec::new();
    for (member, entry) in defining {
        if member.drained {
            drained.push(member.id.clone());
        } else if !member.may_lead {
            refusing.push(member.id.clone());
        } else if let Some(req) = entry
            .version_req
            .as_ref()
            .filter(|req| !req.matches(&member.release))
        {
            versions
                .entry(req.to_string())
                .or_default()
                .push(format!("{} ({})", member.id, member.release));
        } else if !entry.labels_match(&member.labels) {
            labels
                .entry(label_pairs(&entry.require_labels))
                .or_default()
                .push(format!("{} ({})", member.id, label_pairs(&member.labels)));
        }
    }
    let mut reasons: Vec<String> = Vec::new();
    for (req, nodes) in versions {
        reasons.push(format!(
            "version_req {req} matches none of {}",
            nodes.join(", ")
        ));
    }
    for (req, nodes) in labels {
        reasons.push(format!(
            "require_labels {req} matches none of {}",
            nodes.join(", ")
        ));
    }
    match drained.len() {
        0 => {}
        1 => reasons.push(format!("{} is drained", drained[0])),
        _ => reasons.push(format!("{} are drained", drained.join(", "))),
    }
    if !refusing.is_empty() {
        reasons.push(format!(
            "{} may not lead (clock too far off ZooKeeper's)",
            refusing.join(", ")
        ));
    }
    reasons.join("; ")
}

/// `a=1, b=2`, or `no labels`.
pub fn label_pairs(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "no labels".into();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
