//! An in-memory ZooKeeper server with real ZooKeeper semantics for the generic operations the
//! node speaks ([`ZkOp`]): string paths, byte data, [`Stat`] (version, ephemeral owner = session
//! id, ctime/mtime from the server's clock, czxid/mzxid), persistent and ephemeral creates (the
//! parent must exist; ephemerals have no children), versioned delete / set / check, get,
//! children, exists, sync, atomic multi (the first failing operation's index, nothing applied),
//! persistent recursive watches, and sessions that expire when the server has not heard from
//! their client for the session timeout (their ephemerals go in one transaction).
//!
//! No network and no clock of its own: the caller passes the time in, delivers the replies and
//! hands each [`Event`] to the sessions whose watches cover it. The one model of ZooKeeper the
//! tests have: the node's unit tests (`test_fixtures::Store`, one session) and the simulation
//! (`tests/sim`, many sessions over a network it drives) both run on it. Test code only: built
//! for the crate's tests and, through the `testkit` feature that the crate's dev-dependency on
//! itself turns on, for its integration tests; never in the daemon.

use std::collections::{BTreeMap, BTreeSet};

use super::io::{CreateMode, Stat, WatchKind, ZkFail, ZkOk, ZkOp};

/// Milliseconds of true virtual time since the scenario started.
pub type Ms = u64;

/// A change to the tree, as a persistent recursive watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub path: String,
    pub kind: WatchKind,
    /// The transaction that made it (events of one transaction share it).
    pub zxid: i64,
}

#[derive(Debug, Clone)]
pub struct Znode {
    pub data: Vec<u8>,
    pub stat: Stat,
    pub children: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub struct Session {
    pub alive: bool,
    pub timeout: Ms,
    pub last_heard: Ms,
    pub ephemerals: BTreeSet<String>,
    /// Roots of this session's persistent recursive watches.
    pub watches: BTreeSet<String>,
}

/// What one write did, for the checker: the path, the data before and after (`None` = absent),
/// and the session that wrote it (0 for the server itself, e.g. an expiry).
#[derive(Debug, Clone)]
pub struct Write {
    pub path: String,
    pub before: Option<(Vec<u8>, Stat)>,
    pub after: Option<(Vec<u8>, Stat)>,
    pub session: i64,
}

/// One ZooKeeper server.
#[derive(Debug)]
pub struct ModelZk {
    pub nodes: BTreeMap<String, Znode>,
    pub sessions: BTreeMap<i64, Session>,
    pub zxid: i64,
    next_session: i64,
    /// The server's wall clock at virtual time 0, in ms since the Unix epoch.
    epoch_ms: i64,
}

/// The undo log of a transaction in progress: (path, the znode before; `None` = absent).
type Undo = Vec<(String, Option<Znode>)>;

impl ModelZk {
    pub fn new(epoch_ms: i64) -> ModelZk {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Znode {
                data: Vec::new(),
                stat: Stat::default(),
                children: BTreeSet::new(),
            },
        );
        ModelZk {
            nodes,
            sessions: BTreeMap::new(),
            zxid: 0,
            next_session: 0x1000,
            epoch_ms,
        }
    }

    /// The server's wall clock at `now`, in ms since the Unix epoch.
    pub fn wall_ms(&self, now: Ms) -> i64 {
        self.epoch_ms + now as i64
    }

    pub fn open_session(&mut self, timeout: Ms, now: Ms) -> i64 {
        self.next_session += 1;
        let id = self.next_session;
        self.open_session_as(id, timeout, now);
        id
    }

    /// Opens session `id` (a unit test's session 1), as [`ModelZk::open_session`] does.
    pub fn open_session_as(&mut self, id: i64, timeout: Ms, now: Ms) {
        self.sessions.insert(
            id,
            Session {
                alive: true,
                timeout,
                last_heard: now,
                ephemerals: BTreeSet::new(),
                watches: BTreeSet::new(),
            },
        );
    }

    pub fn alive(&self, session: i64) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.alive)
    }

    /// The client of `session` was heard from: its expiry moves on.
    pub fn touch(&mut self, session: i64, now: Ms) {
        if let Some(s) = self.sessions.get_mut(&session).filter(|s| s.alive) {
            s.last_heard = now;
        }
    }

    /// When `session` expires if its client stays silent.
    pub fn expires_at(&self, session: i64) -> Option<Ms> {
        let s = self.sessions.get(&session).filter(|s| s.alive)?;
        Some(s.last_heard + s.timeout)
    }

    /// Ends `session` (expiry or close): its ephemerals are deleted in one transaction.
    pub fn end_session(&mut self, session: i64, writes: &mut Vec<Write>) -> Vec<Event> {
        let Some(s) = self.sessions.get_mut(&session).filter(|s| s.alive) else {
            return Vec::new();
        };
        s.alive = false;
        s.watches.clear();
        let ephemerals = std::mem::take(&mut s.ephemerals);
        let mut events = Vec::new();
        if ephemerals.is_empty() {
            return events;
        }
        self.zxid += 1;
        let zxid = self.zxid;
        // Deepest first (ephemerals have no children, but keep the rule general).
        for path in ephemerals.iter().rev() {
            let before = self.nodes.get(path).map(|n| (n.data.clone(), n.stat));
            self.remove(path);
            writes.push(Write {
                path: path.clone(),
                before,
                after: None,
                session: 0,
            });
            events.push(Event {
                path: path.clone(),
                kind: WatchKind::Deleted,
                zxid,
            });
        }
        events
    }

    /// The sessions whose persistent recursive watches cover `path`.
    pub fn watchers(&self, path: &str) -> Vec<i64> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.alive && s.watches.iter().any(|root| covers(root, path)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Applies `op` for `session` at `now`. Returns the reply, the watch events it caused, and
    /// appends every write to `writes`.
    pub fn apply(
        &mut self,
        session: i64,
        op: &ZkOp,
        now: Ms,
        writes: &mut Vec<Write>,
    ) -> (Result<ZkOk, ZkFail>, Vec<Event>) {
        if !self.alive(session) {
            return (Err(ZkFail::SessionExpired), Vec::new());
        }
        self.touch(session, now);
        match op {
            ZkOp::GetData { path } => (
                self.nodes
                    .get(path)
                    .map(|n| ZkOk::Data(n.data.clone(), n.stat))
                    .ok_or(ZkFail::NoNode),
                Vec::new(),
            ),
            ZkOp::GetChildren { path } => (
                self.nodes
                    .get(path)
                    .map(|n| ZkOk::Children(n.children.iter().cloned().collect()))
                    .ok_or(ZkFail::NoNode),
                Vec::new(),
            ),
            ZkOp::Exists { path } => (
                Ok(ZkOk::Exists(self.nodes.get(path).map(|n| n.stat))),
                Vec::new(),
            ),
            ZkOp::Sync { .. } => (Ok(ZkOk::Done), Vec::new()),
            ZkOp::AddPersistentRecursiveWatch { path } => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.watches.insert(path.clone());
                }
                (Ok(ZkOk::Done), Vec::new())
            }
            ZkOp::Check { .. } => (
                Err(ZkFail::Other("check outside a multi".into())),
                Vec::new(),
            ),
            ZkOp::Multi(ops) => {
                if let Some(bad) = ops.iter().position(|o| {
                    !matches!(
                        o,
                        ZkOp::Create { .. }
                            | ZkOp::Delete { .. }
                            | ZkOp::SetData { .. }
                            | ZkOp::Check { .. }
                    )
                }) {
                    return (
                        Err(ZkFail::Multi {
                            index: bad,
                            error: Box::new(ZkFail::Other("not allowed in a multi".into())),
                        }),
                        Vec::new(),
                    );
                }
                self.transaction(session, ops, now, writes)
            }
            write => {
                let (result, events) =
                    self.transaction(session, std::slice::from_ref(write), now, writes);
                let result = match result {
                    Ok(ZkOk::Multi(mut oks)) => Ok(oks.remove(0)),
                    Err(ZkFail::Multi { error, .. }) => Err(*error),
                    other => other,
                };
                (result, events)
            }
        }
    }

    /// Applies `ops` atomically as one transaction (one zxid): all or, at the first failure,
    /// none (`ZkFail::Multi { index }`).
    fn transaction(
        &mut self,
        session: i64,
        ops: &[ZkOp],
        now: Ms,
        writes: &mut Vec<Write>,
    ) -> (Result<ZkOk, ZkFail>, Vec<Event>) {
        let zxid = self.zxid + 1;
        let mtime = self.wall_ms(now);
        let mut undo: Undo = Vec::new();
        let mut oks = Vec::new();
        let mut events = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            match self.one(session, op, zxid, mtime, &mut undo) {
                Ok((ok, event)) => {
                    oks.push(ok);
                    if let Some((path, kind)) = event {
                        events.push(Event { path, kind, zxid });
                    }
                }
                Err(error) => {
                    for (path, before) in undo.into_iter().rev() {
                        self.restore(&path, before);
                    }
                    return (
                        Err(ZkFail::Multi {
                            index,
                            error: Box::new(error),
                        }),
                        Vec::new(),
                    );
                }
            }
        }
        if !undo.is_empty() {
            self.zxid = zxid;
        }
        // One Write per path touched, from its state before the transaction to after it.
        let mut seen = BTreeSet::new();
        for (path, before) in &undo {
            if seen.insert(path.clone()) {
                writes.push(Write {
                    path: path.clone(),
                    before: before.as_ref().map(|n| (n.data.clone(), n.stat)),
                    after: self.nodes.get(path).map(|n| (n.data.clone(), n.stat)),
                    session,
                });
            }
        }
        (Ok(ZkOk::Multi(oks)), events)
    }

    /// A create of a transaction, recording what it changes in `undo`.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn create(
        &mut self,
        session: i64,
        path: &String,
        data: &[u8],
        mode: CreateMode,
        zxid: i64,
        mtime: i64,
        undo: &mut Undo,
    ) -> Result<(ZkOk, Option<(String, WatchKind)>), ZkFail> {
        let parent = parent(path).ok_or_else(|| ZkFail::Other(format!("bad path {path}")))?;
        if self.nodes.contains_key(path) {
            return Err(ZkFail::NodeExists);
        }
        let Some(p) = self.nodes.get(parent) else {
            return Err(ZkFail::NoNode);
        };
        if p.stat.ephemeral_owner != 0 {
            return Err(ZkFail::Other("no children for ephemerals".into()));
        }
        let owner = match mode {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => session,
            // The simulation numbers the operator's requests (`Sim::create_request`).
            CreateMode::PersistentSequential => {
                return Err(ZkFail::Other("the model has no sequential znodes".into()));
            }
        };
        let stat = Stat {
            version: 0,
            ephemeral_owner: owner,
            mtime_ms: mtime,
            ctime_ms: mtime,
            czxid: zxid,
            mzxid: zxid,
        };
        undo.push((parent.to_string(), self.nodes.get(parent).cloned()));
        undo.push((path.clone(), None));
        self.nodes
            .get_mut(parent)
            .expect("checked")
            .children
            .insert(name(path).to_string());
        self.nodes.insert(
            path.clone(),
            Znode {
                data: data.to_vec(),
                stat,
                children: BTreeSet::new(),
            },
        );
        if owner != 0 {
            self.sessions
                .get_mut(&owner)
                .expect("alive")
                .ephemerals
                .insert(path.clone());
        }
        Ok((
            ZkOk::Created(stat),
            Some((path.clone(), WatchKind::Created)),
        ))
    }

    /// One write of a transaction, recording what it changes in `undo`.
    #[allow(clippy::type_complexity)]
    fn one(
        &mut self,
        session: i64,
        op: &ZkOp,
        zxid: i64,
        mtime: i64,
        undo: &mut Undo,
    ) -> Result<(ZkOk, Option<(String, WatchKind)>), ZkFail> {
        match op {
            ZkOp::Create {
                path, data, mode, ..
            } => self.create(session, path, data, *mode, zxid, mtime, undo),
            ZkOp::Delete { path, version } => {
                let node = self.nodes.get(path).ok_or(ZkFail::NoNode)?;
                if version.is_some_and(|v| v != node.stat.version) {
                    return Err(ZkFail::BadVersion);
                }
                if !node.children.is_empty() {
                    return Err(ZkFail::NotEmpty);
                }
                if path == "/" {
                    return Err(ZkFail::Other("cannot delete /".into()));
                }
                let parent = parent(path).expect("not the root").to_string();
                undo.push((parent.clone(), self.nodes.get(&parent).cloned()));
                undo.push((path.clone(), Some(node.clone())));
                self.remove(path);
                Ok((ZkOk::Done, Some((path.clone(), WatchKind::Deleted))))
            }
            ZkOp::SetData {
                path,
                data,
                version,
            } => {
                let node = self.nodes.get(path).ok_or(ZkFail::NoNode)?;
                if version.is_some_and(|v| v != node.stat.version) {
                    return Err(ZkFail::BadVersion);
                }
                undo.push((path.clone(), Some(node.clone())));
                let node = self.nodes.get_mut(path).expect("checked");
                node.data = data.clone();
                node.stat.version += 1;
                node.stat.mtime_ms = mtime;
                node.stat.mzxid = zxid;
                Ok((
                    ZkOk::Stat(node.stat),
                    Some((path.clone(), WatchKind::DataChanged)),
                ))
            }
            ZkOp::Check { path, version } => {
                let node = self.nodes.get(path).ok_or(ZkFail::NoNode)?;
                // Version -1 checks only that the znode exists, as ZooKeeper's check does.
                if *version != -1 && node.stat.version != *version {
                    return Err(ZkFail::BadVersion);
                }
                Ok((ZkOk::Done, None))
            }
            other => Err(ZkFail::Other(format!("not a write: {other:?}"))),
        }
    }

    /// Plants `path` with `data` and `stat` as a test or a stranger writes it outside any
    /// session's call: its missing parents are created empty, an existing znode keeps its
    /// children, an ephemeral owner that is a session of this server owns it.
    pub fn plant(&mut self, path: &str, data: Vec<u8>, stat: Stat) {
        if let Some(parent) = parent(path)
            && !self.nodes.contains_key(parent)
        {
            self.plant(parent, Vec::new(), Stat::default());
        }
        if let Some(p) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
            p.children.insert(name(path).to_string());
        }
        if let Some(s) = self.sessions.get_mut(&stat.ephemeral_owner) {
            s.ephemerals.insert(path.to_string());
        }
        let children = self
            .nodes
            .remove(path)
            .map(|n| n.children)
            .unwrap_or_default();
        self.nodes.insert(
            path.to_string(),
            Znode {
                data,
                stat,
                children,
            },
        );
    }

    /// Removes `path` and everything under it, as a stranger's recursive delete does; whether
    /// it was there.
    pub fn remove_tree(&mut self, path: &str) -> bool {
        let Some(node) = self.nodes.get(path) else {
            return false;
        };
        let children: Vec<String> = node.children.iter().cloned().collect();
        for child in children {
            let below = if path == "/" {
                format!("/{child}")
            } else {
                format!("{path}/{child}")
            };
            self.remove_tree(&below);
        }
        self.remove(path);
        true
    }

    /// Removes `path` (a leaf) from the tree, its parent's children and its owner's ephemerals.
    fn remove(&mut self, path: &str) {
        if let Some(node) = self.nodes.remove(path) {
            if let Some(p) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
                p.children.remove(name(path));
            }
            let owner = node.stat.ephemeral_owner;
            if let Some(s) = self.sessions.get_mut(&owner) {
                s.ephemerals.remove(path);
            }
        }
    }

    /// Undoes one step of a failed transaction.
    fn restore(&mut self, path: &str, before: Option<Znode>) {
        match before {
            None => {
                self.remove(path);
            }
            Some(node) => {
                let owner = node.stat.ephemeral_owner;
                if owner != 0
                    && let Some(s) = self.sessions.get_mut(&owner)
                {
                    s.ephemerals.insert(path.to_string());
                }
                if let Some(p) = parent(path).and_then(|p| self.nodes.get_mut(p)) {
                    p.children.insert(name(path).to_string());
                }
                self.nodes.insert(path.to_string(), node);
            }
        }
    }
}

/// Whether a persistent recursive watch on `root` reports changes of `path`.
pub fn covers(root: &str, path: &str) -> bool {
    path == root
        || root == "/"
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn parent(path: &str) -> Option<&str> {
    if !path.starts_with('/') || path == "/" || path.ends_with('/') || path.contains("//") {
        return None;
    }
    let at = path.rfind('/').expect("starts with /");
    Some(if at == 0 { "/" } else { &path[..at] })
}

fn name(path: &str) -> &str {
    &path[path.rfind('/').map_or(0, |at| at + 1)..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(path: &str, mode: CreateMode) -> ZkOp {
        ZkOp::Create {
            path: path.into(),
            data: path.as_bytes().to_vec(),
            mode,
            acl: Default::default(),
        }
    }

    #[test]
    fn the_model_zookeeper_applies_a_multi_atomically_and_names_the_failing_operation() {
        let mut zk = ModelZk::new(1_000_000);
        let s = zk.open_session(10_000, 0);
        let mut writes = Vec::new();
        assert!(
            zk.apply(s, &create("/a", CreateMode::Persistent), 5, &mut writes)
                .0
                .is_ok()
        );
        let multi = ZkOp::Multi(vec![
            create("/a/b", CreateMode::Persistent),
            ZkOp::SetData {
                path: "/a".into(),
                data: b"x".to_vec(),
                version: Some(0),
            },
            ZkOp::Check {
                path: "/a".into(),
                version: 0,
            },
        ]);
        let (result, events) = zk.apply(s, &multi, 6, &mut writes);
        assert_eq!(
            result,
            Err(ZkFail::Multi {
                index: 2,
                error: Box::new(ZkFail::BadVersion)
            })
        );
        assert!(events.is_empty());
        assert!(!zk.nodes.contains_key("/a/b"));
        assert_eq!(zk.nodes["/a"].data, b"/a");
        assert_eq!(zk.nodes["/a"].stat.version, 0);
        assert!(zk.nodes["/a"].children.is_empty());
        let zxid = zk.zxid;
        let multi = ZkOp::Multi(vec![
            create("/a/b", CreateMode::Ephemeral),
            ZkOp::SetData {
                path: "/a".into(),
                data: b"x".to_vec(),
                version: Some(0),
            },
            ZkOp::Check {
                path: "/a".into(),
                version: 1,
            },
        ]);
        let (result, events) = zk.apply(s, &multi, 7, &mut writes);
        let Ok(ZkOk::Multi(oks)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(oks.len(), 3);
        assert_eq!(zk.zxid, zxid + 1);
        assert_eq!(events.len(), 2);
        let b = zk.nodes["/a/b"].stat;
        assert_eq!(
            (b.ephemeral_owner, b.czxid, b.mtime_ms),
            (s, zxid + 1, 1_000_007)
        );
        assert_eq!(zk.nodes["/a"].stat.version, 1);
    }

    #[test]
    fn the_model_zookeeper_creates_and_deletes_one_path_in_one_multi_reporting_both_events() {
        // How a node proves `members/<node>` absent while deleting a lease: the create fails
        // (and the multi with it) if the znode exists; otherwise it is created and gone.
        let mut zk = ModelZk::new(0);
        let s = zk.open_session(10_000, 0);
        let mut writes = Vec::new();
        for path in ["/m", "/l", "/l/t"] {
            assert!(
                zk.apply(s, &create(path, CreateMode::Persistent), 1, &mut writes)
                    .0
                    .is_ok()
            );
        }
        let prove = |lease_version| {
            ZkOp::Multi(vec![
                create("/m/n2", CreateMode::Persistent),
                ZkOp::Delete {
                    path: "/m/n2".into(),
                    version: None,
                },
                ZkOp::Delete {
                    path: "/l/t".into(),
                    version: Some(lease_version),
                },
            ])
        };
        assert!(
            zk.apply(s, &create("/m/n2", CreateMode::Ephemeral), 2, &mut writes)
                .0
                .is_ok()
        );
        let (result, events) = zk.apply(s, &prove(0), 3, &mut writes);
        assert_eq!(
            result,
            Err(ZkFail::Multi {
                index: 0,
                error: Box::new(ZkFail::NodeExists)
            })
        );
        assert!(events.is_empty());
        assert!(zk.nodes.contains_key("/l/t") && zk.nodes.contains_key("/m/n2"));
        let mut gone = Vec::new();
        let delete = ZkOp::Delete {
            path: "/m/n2".into(),
            version: None,
        };
        assert!(zk.apply(s, &delete, 4, &mut gone).0.is_ok());
        let zxid = zk.zxid;
        let mut writes = Vec::new();
        let (result, events) = zk.apply(s, &prove(0), 5, &mut writes);
        assert!(result.is_ok(), "{result:?}");
        let seen: Vec<(&str, WatchKind, i64)> = events
            .iter()
            .map(|e| (e.path.as_str(), e.kind, e.zxid))
            .collect();
        assert_eq!(
            seen,
            [
                ("/m/n2", WatchKind::Created, zxid + 1),
                ("/m/n2", WatchKind::Deleted, zxid + 1),
                ("/l/t", WatchKind::Deleted, zxid + 1),
            ]
        );
        assert!(!zk.nodes.contains_key("/m/n2") && !zk.nodes.contains_key("/l/t"));
        assert!(zk.nodes["/m"].children.is_empty());
        let member = writes.iter().find(|w| w.path == "/m/n2").expect("written");
        assert!(member.before.is_none() && member.after.is_none());
    }

    #[test]
    fn the_model_zookeeper_refuses_orphans_non_empty_deletes_and_stale_versions() {
        let mut zk = ModelZk::new(0);
        let s = zk.open_session(10_000, 0);
        let mut w = Vec::new();
        let mut run = |zk: &mut ModelZk, op: ZkOp| zk.apply(s, &op, 1, &mut w).0;
        assert_eq!(
            run(&mut zk, create("/a/b", CreateMode::Persistent)),
            Err(ZkFail::NoNode)
        );
        assert!(run(&mut zk, create("/a", CreateMode::Persistent)).is_ok());
        assert_eq!(
            run(&mut zk, create("/a", CreateMode::Persistent)),
            Err(ZkFail::NodeExists)
        );
        assert!(run(&mut zk, create("/a/b", CreateMode::Persistent)).is_ok());
        let delete = |version| ZkOp::Delete {
            path: "/a".into(),
            version,
        };
        assert_eq!(run(&mut zk, delete(None)), Err(ZkFail::NotEmpty));
        let set = ZkOp::SetData {
            path: "/a/b".into(),
            data: vec![],
            version: Some(3),
        };
        assert_eq!(run(&mut zk, set), Err(ZkFail::BadVersion));
        assert_eq!(
            run(&mut zk, ZkOp::GetChildren { path: "/a".into() }),
            Ok(ZkOk::Children(vec!["b".into()]))
        );
    }

    #[test]
    fn the_model_zookeeper_deletes_an_expired_sessions_ephemerals_for_its_watchers() {
        let mut zk = ModelZk::new(0);
        let a = zk.open_session(10_000, 0);
        let b = zk.open_session(10_000, 0);
        let mut w = Vec::new();
        for op in [
            create("/m", CreateMode::Persistent),
            create("/m/a", CreateMode::Ephemeral),
        ] {
            zk.apply(a, &op, 1, &mut w).0.expect("created");
        }
        zk.apply(
            b,
            &ZkOp::AddPersistentRecursiveWatch { path: "/m".into() },
            1,
            &mut w,
        )
        .0
        .expect("watching");
        assert_eq!(zk.expires_at(a), Some(10_001));
        let events = zk.end_session(a, &mut w);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, WatchKind::Deleted);
        assert_eq!(zk.watchers(&events[0].path), vec![b]);
        assert!(!zk.nodes.contains_key("/m/a"));
        assert_eq!(
            zk.apply(a, &ZkOp::Exists { path: "/m".into() }, 2, &mut w)
                .0,
            Err(ZkFail::SessionExpired)
        );
    }
}
