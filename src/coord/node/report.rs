//! The node's reports: once-per-change operator events (`Output::Report`) with their fields,
//! and the ZooKeeper shell command their fixes name.

use std::collections::VecDeque;

use super::Node;
use super::io::{Level, Output, Report};

impl Node {
    pub(super) fn report(&mut self, level: Level, message: impl Into<String>) -> ReportBuilder<'_> {
        self.io.out.push_back(Output::Report(Report {
            level,
            message: message.into(),
            fields: Vec::new(),
        }));
        ReportBuilder {
            out: Some(&mut self.io.out),
        }
    }

    /// ZooKeeper's shell pointed at this cluster's servers, for the fixes a report gives (the
    /// paths in reports are absolute: the chroot is part of them). Debian installs it as
    /// `/usr/share/zookeeper/bin/zkCli.sh`.
    pub(super) fn zk_cli(&self) -> String {
        // The hosts part of the connect string: everything before the chroot's `/`.
        let hosts = self.cfg.connect.split('/').next().unwrap_or_default();
        format!("zkCli.sh -server {hosts}")
    }

    /// Reports once per `key` (until [`Node::forget_report`]).
    pub(super) fn report_once(
        &mut self,
        key: String,
        level: Level,
        message: String,
    ) -> ReportBuilder<'_> {
        if self.io.reported.insert(key) {
            self.report(level, message)
        } else {
            ReportBuilder { out: None }
        }
    }
}

/// Adds `key=value` fields to the report just pushed (nothing when the report was muted).
pub(super) struct ReportBuilder<'a> {
    out: Option<&'a mut VecDeque<Output>>,
}

impl ReportBuilder<'_> {
    pub(super) fn field(mut self, key: &'static str, value: impl std::fmt::Display) -> Self {
        if let Some(Output::Report(report)) = self.out.as_mut().and_then(|o| o.back_mut()) {
            report.fields.push((key, value.to_string()));
        }
        self
    }
}

/// Why a znode that should be a live member's is not, in a report's words.
pub(super) fn foreign_owner(ephemeral_owner: i64) -> String {
    if ephemeral_owner == 0 {
        "it is persistent".to_string()
    } else {
        format!("its session {ephemeral_owner:x} is no member's")
    }
}
