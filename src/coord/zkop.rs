//! One generic ZooKeeper operation, as data: what the sans-IO cluster node
//! ([`crate::coord::node`]) and the operator's writes ([`crate::coord::operator`]) emit, and
//! what a driver performs (`coord::zk::call` against ZooKeeper, the simulation's model in
//! `tests/sim`). It sits below both so that they speak one language.

/// How a znode is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    /// Persistent, its name the path given with ZooKeeper's 10-digit sequence appended (an
    /// operator's request: [`crate::coord::operator::request`]).
    PersistentSequential,
}

/// Who may use a znode the node (or an operator's command) creates: chosen by the driver from
/// its settings ([`NodeConfig::acl`](crate::coord::node::NodeConfig::acl)), never by the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeAcl {
    /// world:anyone:all, as before authentication existed.
    #[default]
    Open,
    /// auth::cdrwa: only a session authenticated as the creator may read or change it.
    CreatorAll,
}

/// One ZooKeeper operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkOp {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
        acl: NodeAcl,
    },
    /// `version: None` deletes any version (-1).
    Delete {
        path: String,
        version: Option<i32>,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    /// Only inside [`ZkOp::Multi`].
    Check {
        path: String,
        version: i32,
    },
    GetData {
        path: String,
    },
    GetChildren {
        path: String,
    },
    Exists {
        path: String,
    },
    Sync {
        path: String,
    },
    /// A persistent recursive watch: events arrive as
    /// [`Input::Watch`](crate::coord::node::io::Input::Watch) until the session ends.
    AddPersistentRecursiveWatch {
        path: String,
    },
    /// Create / Delete / SetData / Check only, applied atomically in this order.
    Multi(Vec<ZkOp>),
}
