//! The hand-written node's model of ZooKeeper (typed paths and records); replaced by [`model_zk`]
//! when the real node drives the simulation.

use super::*;

// ------------------------------------------------------------------------------------------------
// The ZooKeeper model
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Path {
    Member(NodeIx),
    Lease(TaskIx),
    Record(TaskIx),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FireRecord {
    pub(crate) tick: DateTime<Utc>,
    pub(crate) node: NodeIx,
    pub(crate) session: SessionId,
}

#[derive(Debug, Clone)]
pub(crate) enum Data {
    Member(Member),
    Lease,
    Record(FireRecord),
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Create {
        path: Path,
        data: Data,
        ephemeral: bool,
    },
    /// `version: None` is ZooKeeper's -1 (any version).
    Delete {
        path: Path,
        version: Option<i32>,
    },
    Set {
        path: Path,
        data: Data,
        version: Option<i32>,
    },
    Check {
        path: Path,
        version: i32,
    },
    Get {
        path: Path,
    },
    /// The children of `members/` and `leases/` with their data and stat.
    List,
    Multi(Vec<Op>),
}

#[derive(Debug, Clone)]
pub(crate) enum OpOk {
    /// The znode's version after a create, set, check or delete.
    Version(i32),
    Data {
        data: Data,
        version: i32,
    },
    List {
        members: Vec<(NodeIx, Member, SessionId)>,
        leases: Vec<(TaskIx, SessionId, i32)>,
    },
    Multi(Vec<i32>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpErr {
    NodeExists { owner: Option<SessionId> },
    NoNode,
    BadVersion,
    Multi { index: usize, error: Box<OpErr> },
    SessionExpired,
}

/// A change to `members/` or `leases/`, as the watch stream carries it.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    MemberUp(NodeIx, Member, SessionId),
    MemberDown(NodeIx),
    LeaseUp(TaskIx, SessionId, i32),
    LeaseDown(TaskIx),
}

/// A successful write of a fire record: a claim, as the server saw it.
pub(crate) struct RecordWrite {
    pub(crate) task: TaskIx,
    pub(crate) previous: Option<DateTime<Utc>>,
    pub(crate) record: FireRecord,
}

#[derive(Debug)]
pub(crate) struct Znode {
    pub(crate) data: Data,
    pub(crate) version: i32,
    pub(crate) owner: Option<SessionId>,
}

#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) alive: bool,
    pub(crate) timeout: Ms,
    pub(crate) last_heard: Ms,
    /// The connection the session is attached to now; requests on older ones are dropped.
    pub(crate) conn: Option<ConnId>,
}

/// One ZooKeeper server: the data tree and the sessions. No network, no time of its own.
#[derive(Debug, Default)]
pub(crate) struct ModelZk {
    pub(crate) znodes: BTreeMap<Path, Znode>,
    pub(crate) sessions: BTreeMap<SessionId, Session>,
    pub(crate) next_session: u64,
    /// Leases deleted by a session that did not own them: (task, owner, deleter). ZooKeeper
    /// allows it; the checker does not.
    pub(crate) foreign_lease_deletes: Vec<(TaskIx, Option<SessionId>, SessionId)>,
}

impl ModelZk {
    pub(crate) fn open_session(&mut self, timeout: Ms, now: Ms, conn: ConnId) -> SessionId {
        self.next_session += 1;
        let id = SessionId(self.next_session);
        self.sessions.insert(
            id,
            Session {
                alive: true,
                timeout,
                last_heard: now,
                conn: Some(conn),
            },
        );
        id
    }

    /// Ends a session (expiry or close): its ephemerals go, and watchers hear of it.
    pub(crate) fn end_session(&mut self, id: SessionId, changes: &mut Vec<Change>) {
        if let Some(session) = self.sessions.get_mut(&id) {
            session.alive = false;
        }
        let owned: Vec<Path> = self
            .znodes
            .iter()
            .filter(|(_, z)| z.owner == Some(id))
            .map(|(p, _)| *p)
            .collect();
        for path in owned {
            self.znodes.remove(&path);
            changes.extend(down_change(path));
        }
    }

    pub(crate) fn validate(&self, op: &Op) -> Result<(), OpErr> {
        match op {
            Op::Create { path, .. } => match self.znodes.get(path) {
                Some(existing) => Err(OpErr::NodeExists {
                    owner: existing.owner,
                }),
                None => Ok(()),
            },
            Op::Delete { path, version } | Op::Set { path, version, .. } => {
                match self.znodes.get(path) {
                    None => Err(OpErr::NoNode),
                    Some(z) if version.is_some_and(|v| v != z.version) => Err(OpErr::BadVersion),
                    Some(_) => Ok(()),
                }
            }
            Op::Check { path, version } => match self.znodes.get(path) {
                None => Err(OpErr::NoNode),
                Some(z) if z.version != *version => Err(OpErr::BadVersion),
                Some(_) => Ok(()),
            },
            Op::Get { .. } | Op::List | Op::Multi(_) => Ok(()),
        }
    }

    /// Applies a validated write and returns the znode's version after it.
    pub(crate) fn write(
        &mut self,
        session: SessionId,
        op: &Op,
        changes: &mut Vec<Change>,
        writes: &mut Vec<RecordWrite>,
    ) -> i32 {
        match op {
            Op::Create {
                path,
                data,
                ephemeral,
            } => {
                self.znodes.insert(
                    *path,
                    Znode {
                        data: data.clone(),
                        version: 0,
                        owner: ephemeral.then_some(session),
                    },
                );
                match (path, data) {
                    (Path::Member(n), Data::Member(m)) => {
                        changes.push(Change::MemberUp(*n, m.clone(), session))
                    }
                    (Path::Lease(t), _) => changes.push(Change::LeaseUp(*t, session, 0)),
                    (Path::Record(t), Data::Record(r)) => writes.push(RecordWrite {
                        task: *t,
                        previous: None,
                        record: r.clone(),
                    }),
                    _ => {}
                }
                0
            }
            Op::Delete { path, .. } => {
                let removed = self.znodes.remove(path).expect("validated");
                if let Path::Lease(t) = path
                    && removed.owner != Some(session)
                {
                    self.foreign_lease_deletes
                        .push((*t, removed.owner, session));
                }
                changes.extend(down_change(*path));
                0
            }
            Op::Set { path, data, .. } => {
                let znode = self.znodes.get_mut(path).expect("validated");
                let previous = match &znode.data {
                    Data::Record(r) => Some(r.tick),
                    _ => None,
                };
                znode.data = data.clone();
                znode.version += 1;
                if let (Path::Member(n), Data::Member(m), Some(owner)) = (path, data, znode.owner) {
                    changes.push(Change::MemberUp(*n, m.clone(), owner));
                }
                if let (Path::Record(t), Data::Record(r)) = (path, data) {
                    writes.push(RecordWrite {
                        task: *t,
                        previous,
                        record: r.clone(),
                    });
                }
                znode.version
            }
            Op::Check { version, .. } => *version,
            Op::Get { .. } | Op::List | Op::Multi(_) => unreachable!("not a write"),
        }
    }

    pub(crate) fn apply(
        &mut self,
        session: SessionId,
        op: &Op,
        changes: &mut Vec<Change>,
        writes: &mut Vec<RecordWrite>,
    ) -> Result<OpOk, OpErr> {
        match op {
            Op::Get { path } => match self.znodes.get(path) {
                Some(z) => Ok(OpOk::Data {
                    data: z.data.clone(),
                    version: z.version,
                }),
                None => Err(OpErr::NoNode),
            },
            Op::List => {
                let mut members = Vec::new();
                let mut leases = Vec::new();
                for (path, z) in &self.znodes {
                    match (path, &z.data) {
                        (Path::Member(n), Data::Member(m)) => {
                            members.push((*n, m.clone(), z.owner.expect("ephemeral")))
                        }
                        (Path::Lease(t), _) => {
                            leases.push((*t, z.owner.expect("ephemeral"), z.version))
                        }
                        _ => {}
                    }
                }
                Ok(OpOk::List { members, leases })
            }
            Op::Multi(ops) => {
                // All or nothing: the ops of one multi touch distinct paths, so validating each
                // against the current tree is validating them in sequence.
                for (index, op) in ops.iter().enumerate() {
                    if let Err(error) = self.validate(op) {
                        return Err(OpErr::Multi {
                            index,
                            error: Box::new(error),
                        });
                    }
                }
                Ok(OpOk::Multi(
                    ops.iter()
                        .map(|op| self.write(session, op, changes, writes))
                        .collect(),
                ))
            }
            single => {
                self.validate(single)?;
                Ok(OpOk::Version(self.write(session, single, changes, writes)))
            }
        }
    }

    pub(crate) fn lease_owner(&self, task: TaskIx) -> Option<SessionId> {
        self.znodes.get(&Path::Lease(task)).and_then(|z| z.owner)
    }
}

pub(crate) fn down_change(path: Path) -> Option<Change> {
    match path {
        Path::Member(n) => Some(Change::MemberDown(n)),
        Path::Lease(t) => Some(Change::LeaseDown(t)),
        Path::Record(_) => None,
    }
}
