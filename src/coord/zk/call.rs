//! Performing one [`ZkOp`] with zookeeper-client, within [`CALL_DEADLINE`], and mapping its
//! errors to the node's [`ZkFail`].

use zookeeper_client::{
    Acls, AddWatchMode, Client, CreateMode as ZkCreateMode, CreateOptions, MultiWriteError,
    MultiWriteResult, PersistentWatcher,
};

use crate::coord::node::CALL_DEADLINE;
use crate::coord::node::io::{CreateMode, NodeAcl, Stat, ZkFail, ZkOk, ZkOp};

/// What a call produced: the reply, and for a watch, the watcher to poll.
pub type Performed = Result<(ZkOk, Option<PersistentWatcher>), ZkFail>;

/// The create options of `mode` and `acl`.
pub fn options(mode: CreateMode, acl: NodeAcl) -> CreateOptions<'static> {
    let acls = match acl {
        NodeAcl::Open => Acls::anyone_all(),
        NodeAcl::CreatorAll => Acls::creator_all(),
    };
    match mode {
        CreateMode::Persistent => ZkCreateMode::Persistent.with_acls(acls),
        CreateMode::Ephemeral => ZkCreateMode::Ephemeral.with_acls(acls),
        CreateMode::PersistentSequential => ZkCreateMode::PersistentSequential.with_acls(acls),
    }
}

/// The node's view of a znode's metadata.
pub fn stat(stat: &zookeeper_client::Stat) -> Stat {
    Stat {
        version: stat.version,
        ephemeral_owner: stat.ephemeral_owner,
        mtime_ms: stat.mtime,
        ctime_ms: stat.ctime,
        czxid: stat.czxid,
        mzxid: stat.mzxid,
    }
}

/// ZooKeeper's error as the node sees it.
pub fn fail(error: zookeeper_client::Error) -> ZkFail {
    use zookeeper_client::Error;
    match error {
        Error::NoNode => ZkFail::NoNode,
        Error::NodeExists => ZkFail::NodeExists,
        Error::BadVersion => ZkFail::BadVersion,
        Error::NotEmpty => ZkFail::NotEmpty,
        Error::NoAuth => ZkFail::NoAuth,
        Error::SessionExpired => ZkFail::SessionExpired,
        Error::ConnectionLoss => ZkFail::ConnectionLoss,
        Error::Timeout => ZkFail::Timeout,
        other => ZkFail::Other(other.to_string()),
    }
}

/// Performs `op` within [`CALL_DEADLINE`].
pub async fn perform(client: Client, op: ZkOp) -> Performed {
    match tokio::time::timeout(CALL_DEADLINE, perform_now(&client, op)).await {
        Ok(performed) => performed,
        Err(_) => Err(ZkFail::Timeout),
    }
}

/// Performs `create` (a [`ZkOp::Create`], its mode sequential) within [`CALL_DEADLINE`]; the
/// name ZooKeeper gave the znode: the last element of the path asked, with the sequence.
pub async fn create_sequential(client: Client, create: ZkOp) -> Result<String, ZkFail> {
    let ZkOp::Create {
        path,
        data,
        mode,
        acl,
    } = create
    else {
        return Err(ZkFail::Other(format!("{create:?} is no create")));
    };
    let created = client.create(&path, &data, &options(mode, acl));
    match tokio::time::timeout(CALL_DEADLINE, created).await {
        Ok(Ok((_, sequence))) => {
            let asked = path.rsplit('/').next().unwrap_or_default();
            Ok(format!("{asked}{sequence}"))
        }
        Ok(Err(error)) => Err(fail(error)),
        Err(_) => Err(ZkFail::Timeout),
    }
}

async fn perform_now(client: &Client, op: ZkOp) -> Performed {
    let ok = match op {
        ZkOp::Create {
            path,
            data,
            mode,
            acl,
        } => {
            let (created, _) = client
                .create(&path, &data, &options(mode, acl))
                .await
                .map_err(fail)?;
            ZkOk::Created(stat(&created))
        }
        ZkOp::Delete { path, version } => {
            client.delete(&path, version).await.map_err(fail)?;
            ZkOk::Done
        }
        ZkOp::SetData {
            path,
            data,
            version,
        } => ZkOk::Stat(stat(
            &client.set_data(&path, &data, version).await.map_err(fail)?,
        )),
        ZkOp::Check { .. } => {
            return Err(ZkFail::Other("a check outside a multi".into()));
        }
        ZkOp::GetData { path } => {
            let (data, found) = client.get_data(&path).await.map_err(fail)?;
            ZkOk::Data(data, stat(&found))
        }
        ZkOp::GetChildren { path } => {
            ZkOk::Children(client.list_children(&path).await.map_err(fail)?)
        }
        ZkOp::Exists { path } => ZkOk::Exists(
            client
                .check_stat(&path)
                .await
                .map_err(fail)?
                .map(|s| stat(&s)),
        ),
        ZkOp::Sync { path } => {
            client.sync(&path).await.map_err(fail)?;
            ZkOk::Done
        }
        ZkOp::AddPersistentRecursiveWatch { path } => {
            let watcher = client
                .watch(&path, AddWatchMode::PersistentRecursive)
                .await
                .map_err(fail)?;
            return Ok((ZkOk::Done, Some(watcher)));
        }
        ZkOp::Multi(ops) => ZkOk::Multi(multi(client, ops).await?),
    };
    Ok((ok, None))
}

async fn multi(client: &Client, ops: Vec<ZkOp>) -> Result<Vec<ZkOk>, ZkFail> {
    let mut writer = client.new_multi_writer();
    for op in &ops {
        let added = match op {
            ZkOp::Create {
                path,
                data,
                mode,
                acl,
            } => writer.add_create(path, data, &options(*mode, *acl)),
            ZkOp::Delete { path, version } => writer.add_delete(path, *version),
            ZkOp::SetData {
                path,
                data,
                version,
            } => writer.add_set_data(path, data, *version),
            ZkOp::Check { path, version } => writer.add_check_version(path, *version),
            other => {
                return Err(ZkFail::Other(format!(
                    "{other:?} cannot be part of a multi"
                )));
            }
        };
        added.map_err(fail)?;
    }
    match writer.commit().await {
        Ok(results) => Ok(results
            .iter()
            .map(|r| match r {
                MultiWriteResult::Check | MultiWriteResult::Delete => ZkOk::Done,
                MultiWriteResult::Create { stat: s, .. } => ZkOk::Created(stat(s)),
                MultiWriteResult::SetData { stat: s } => ZkOk::Stat(stat(s)),
                _ => ZkOk::Done,
            })
            .collect()),
        Err(MultiWriteError::OperationFailed { index, source }) => Err(ZkFail::Multi {
            index,
            error: Box::new(fail(source)),
        }),
        Err(MultiWriteError::RequestFailed { source }) => Err(fail(source)),
    }
}
