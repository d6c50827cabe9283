//! What the two operator request directories, `control/triggers` (manual runs) and
//! `control/backfills`, share: their setup calls, the listing that keeps this node's copy to
//! what is there, and the watch events of their requests.
//!
//! Each directory's own module (`trigger`, `backfill`) keeps its requests, reads and decides
//! on them; this module only routes names to it, and decides nothing about a request.

use std::collections::{BTreeMap, BTreeSet};

use super::Node;
use super::io::{Level, Stat, WatchKind, ZkOp};
use crate::coord::records::Paths;

/// One request directory as the code shared here needs it.
pub(super) struct RequestDir<V: 'static> {
    /// The requests this node knows in it, by name.
    pub(super) known: fn(&mut Node) -> &mut BTreeMap<String, V>,
    /// Reads one request by name (its answer comes back to the directory's own module).
    pub(super) read: fn(&mut Node, String),
    /// The request `name` as read (`data` at `stat`), if it is a record of its name's task.
    pub(super) parse: fn(&str, &[u8], Stat) -> Option<V>,
    /// The version a known request was read at.
    pub(super) version: fn(&V) -> i32,
    /// The path of the request `name`.
    pub(super) path: fn(&Paths, &str) -> String,
    /// What a request is, for the report of a znode that is none: "a manual run".
    pub(super) noun: &'static str,
    /// Who makes them, for that report: "`zkcron trigger TASK` creates them".
    pub(super) made_by: &'static str,
}

/// Where a watch event's path is, seen from a request directory.
pub(super) enum WatchedPath<'a> {
    /// The directory itself.
    Dir,
    /// A request in it, by name.
    Request(&'a str),
    /// Somewhere else.
    Elsewhere,
}

/// Where `path` is, seen from the request directory `dir`.
pub(super) fn watched_path<'a>(dir: &str, path: &'a str) -> WatchedPath<'a> {
    if path == dir {
        return WatchedPath::Dir;
    }
    match path
        .strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        Some(name) => WatchedPath::Request(name),
        None => WatchedPath::Elsewhere,
    }
}

impl Node {
    /// Setup's calls for a request directory: the directory and its persistent recursive watch.
    pub(super) fn request_dir_setup_steps(&self, dir: String) -> Vec<ZkOp> {
        vec![
            self.create_dir(dir.clone()),
            ZkOp::AddPersistentRecursiveWatch { path: dir },
        ]
    }

    /// A watch event on the request `name`: a deleted one is forgotten, any other is read.
    pub(super) fn on_request_watch<V>(&mut self, dir: &RequestDir<V>, name: &str, kind: WatchKind) {
        match kind {
            WatchKind::Deleted => self.forget_request(dir, name),
            WatchKind::Created | WatchKind::DataChanged => (dir.read)(self, name.to_string()),
        }
    }

    /// The directory's listing: the requests no longer there are forgotten, each listed one
    /// is read.
    pub(super) fn on_request_list<V>(&mut self, dir: &RequestDir<V>, names: Vec<String>) {
        let names: BTreeSet<String> = names.into_iter().collect();
        let known = (dir.known)(self);
        let before = known.len();
        known.retain(|name, _| names.contains(name));
        if known.len() != before {
            self.forget_claims_of_gone_requests();
            self.publish();
        }
        for name in names {
            (dir.read)(self, name);
        }
    }

    /// Keeps the request `name` read as `data` at `stat` unless a newer read is known; a znode
    /// that is not a request of its own name is reported once and ignored.
    pub(super) fn learn_request<V>(
        &mut self,
        dir: &RequestDir<V>,
        name: String,
        data: &[u8],
        stat: Stat,
    ) {
        let Some(read) = (dir.parse)(&name, data, stat) else {
            let path = (dir.path)(&self.paths, &name);
            let cli = self.zk_cli();
            self.report_once(
                format!("foreign {} {path} {}", dir.noun, stat.mzxid),
                Level::Warn,
                format!(
                    "ignoring {path}: not {} zkcron can read ({}); remove it: {cli} delete {path}",
                    dir.noun, dir.made_by
                ),
            );
            return self.forget_request(dir, &name);
        };
        let known = (dir.known)(self);
        if known
            .get(&name)
            .is_none_or(|old| (dir.version)(old) <= stat.version)
        {
            known.insert(name, read);
            self.publish();
        }
    }

    /// Forgets the request `name` (gone from the tree), publishing if it was known.
    pub(super) fn forget_request<V>(&mut self, dir: &RequestDir<V>, name: &str) {
        if (dir.known)(self).remove(name).is_some() {
            self.forget_claims_of_gone_requests();
            self.publish();
        }
    }

    /// Forgets every request of the directory (gone from the tree), publishing if any was known.
    pub(super) fn forget_requests<V>(&mut self, dir: &RequestDir<V>) {
        let known = (dir.known)(self);
        if !known.is_empty() {
            known.clear();
            self.forget_claims_of_gone_requests();
            self.publish();
        }
    }
}
