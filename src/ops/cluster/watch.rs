//! What the dashboard's reader (`http::cache::live`) needs of a [`ClusterClient`] beyond a snapshot:
//! recursive watches, reads of the znodes they name, and catching up with changes made in other
//! sessions.

use anyhow::bail;
use zookeeper_client::{AddWatchMode, PersistentWatcher};

use super::{CALL_DEADLINE, ClusterClient};

impl ClusterClient {
    /// Watches every change under `path` (created, changed, deleted znodes, and the
    /// session's states) until the watcher is dropped.
    pub async fn watch_tree(&self, path: &str) -> anyhow::Result<PersistentWatcher> {
        match tokio::time::timeout(
            CALL_DEADLINE,
            self.client.watch(path, AddWatchMode::PersistentRecursive),
        )
        .await
        {
            Ok(Ok(watcher)) => Ok(watcher),
            Ok(Err(error)) => bail!("ZooKeeper at {}: watching {path}: {error}", self.connect),
            Err(_) => bail!("ZooKeeper at {}: watching {path}: no answer", self.connect),
        }
    }

    /// The data of every path (`None` where there is no znode), in multi-reads.
    pub async fn read_many(&self, paths: &[String]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        let read = self.get_many(paths).await?;
        Ok(read.into_iter().map(|r| r.map(|(data, _)| data)).collect())
    }

    /// Waits until this session has seen every change committed before the call: a `sync`,
    /// then a read (ZooKeeper delivers a watch's event before the answer to a later read).
    pub async fn catch_up(&self) -> anyhow::Result<()> {
        let base = self.paths.base.clone();
        match tokio::time::timeout(CALL_DEADLINE, self.client.sync(&base)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => bail!("ZooKeeper at {}: sync {base}: {error}", self.connect),
            Err(_) => bail!("ZooKeeper at {}: sync {base}: no answer", self.connect),
        }
        self.exists(&base).await.map(|_| ())
    }
}
