//! The modelled network and the server: one FIFO connection per (node, attempt) in each
//! direction, lost messages and replies, the server's answers, watches and session expiry.

use super::*;

impl Sim<'_> {
    pub(crate) fn open_link(&mut self, node: NodeIx) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.links.insert(
            id,
            Link {
                node,
                alive: true,
                session: None,
                to_server_at: 0,
                to_node_at: 0,
            },
        );
        id
    }

    pub(crate) fn kill_link(&mut self, conn: ConnId) {
        if let Some(l) = self.links.get_mut(&conn) {
            l.alive = false;
        }
    }

    pub(crate) fn send_up(&mut self, conn: ConnId, msg: Up) {
        let latency = self.latency();
        let now = self.now;
        let l = self.links.get_mut(&conn).expect("known link");
        if !l.alive {
            return;
        }
        if !self.link_up[l.node] {
            l.alive = false;
            return;
        }
        let at = (now + latency).max(l.to_server_at);
        l.to_server_at = at;
        self.push(at, Ev::Up { conn, msg });
    }

    pub(crate) fn send_down(&mut self, conn: ConnId, msg: Down) {
        let latency = self.latency();
        let now = self.now;
        let l = &self.links[&conn];
        let node = l.node;
        if !l.alive {
            return;
        }
        if !self.link_up[node] {
            self.kill_link(conn);
            return;
        }
        let loss = self.procs[node].loss_pct;
        if loss > 0 && matches!(msg, Down::Reply { .. }) && self.rng.random_range(0..100) < loss {
            // Applied, but the reply is lost with the connection; the client sees a reset.
            self.kill_link(conn);
            self.stats.replies_lost += 1;
            note!(
                self,
                Some(node),
                None,
                "reply lost: connection reset".into()
            );
            let delay = self.rng.random_range(5..=200);
            self.timer(node, delay, T::Reset(conn));
            return;
        }
        let l = self.links.get_mut(&conn).expect("known link");
        let at = (now + latency).max(l.to_node_at);
        l.to_node_at = at;
        self.push(
            at,
            Ev::Down {
                node,
                conn,
                msg,
                buffered: false,
            },
        );
    }

    // --------------------------------------------------------------------------------------------
    // Server
    // --------------------------------------------------------------------------------------------

    pub(crate) fn server(&mut self, conn: ConnId, msg: Up) {
        let session = self.links[&conn].session;
        let node = self.links[&conn].node;
        match msg {
            Up::Connect { session: None } => {
                let id = self.zk.open_session(self.sc.session_timeout, self.now);
                self.links.get_mut(&conn).expect("known").session = Some(id);
                self.session_conn.insert(id, conn);
                note!(self, Some(node), None, format!("session {id:x} opened"));
                self.push(self.now + self.sc.session_timeout, Ev::SessionCheck(id));
                self.send_down(conn, Down::Connected { session: id });
            }
            Up::Connect { session: Some(id) } => {
                if self.zk.alive(id) {
                    self.zk.touch(id, self.now);
                    self.session_conn.insert(id, conn);
                    self.links.get_mut(&conn).expect("known").session = Some(id);
                    self.send_down(conn, Down::Connected { session: id });
                } else {
                    self.send_down(conn, Down::Expired);
                }
            }
            Up::Close => self.kill_link(conn),
            Up::Ping => {
                let Some(id) = session else { return };
                if !self.zk.alive(id) {
                    self.send_down(conn, Down::Closed);
                } else if self.session_conn.get(&id) == Some(&conn) {
                    self.zk.touch(id, self.now);
                    self.send_down(conn, Down::Pong);
                }
            }
            Up::CloseSession => {
                let Some(id) = session else { return };
                if self.zk.alive(id) && self.session_conn.get(&id) == Some(&conn) {
                    note!(self, Some(node), None, format!("session {id:x} closed"));
                    self.end_session(id);
                }
                self.kill_link(conn);
            }
            Up::Call { op, zk } => {
                let Some(id) = session else { return };
                if self.zk.alive(id) && self.session_conn.get(&id) != Some(&conn) {
                    return; // An old connection of a live session: ZooKeeper closed it.
                }
                let mut writes = Vec::new();
                let (result, events) = self.zk.apply(id, &zk, self.now, &mut writes);
                self.count_fencing(&zk, &result);
                for write in writes {
                    self.on_write(Some(node), &write);
                }
                self.broadcast(events);
                self.send_down(conn, Down::Reply { op, result });
            }
        }
    }

    /// Claims the server refused, by why.
    pub(crate) fn count_fencing(&mut self, op: &ZkOp, result: &Result<ZkOk, ZkFail>) {
        let ZkOp::Multi(ops) = op else { return };
        if !ops.iter().any(|o| self.record_path(o).is_some()) {
            return;
        }
        match result {
            Err(ZkFail::SessionExpired) => self.stats.fenced_expired += 1,
            Err(ZkFail::Multi { index, .. }) => match &ops[*index] {
                ZkOp::Check { .. } => self.stats.fenced_lease += 1,
                o if self.record_path(o).is_some() => self.stats.fenced_version += 1,
                _ => {}
            },
            _ => {}
        }
    }

    /// The task whose fire record `op` writes.
    pub(crate) fn record_path(&self, op: &ZkOp) -> Option<TaskIx> {
        let path = match op {
            ZkOp::SetData { path, .. } | ZkOp::Create { path, .. } => path,
            _ => return None,
        };
        self.task_of(path, "tasks")
    }

    /// `BASE/<dir>/<task>` → the task.
    pub(crate) fn task_of(&self, path: &str, dir: &str) -> Option<TaskIx> {
        let name = path
            .strip_prefix(BASE)?
            .strip_prefix('/')?
            .strip_prefix(dir)?;
        self.by_name.get(name.strip_prefix('/')?).copied()
    }

    pub(crate) fn end_session(&mut self, id: i64) {
        let mut writes = Vec::new();
        let events = self.zk.end_session(id, &mut writes);
        for write in writes {
            self.on_write(None, &write);
        }
        self.broadcast(events);
    }

    /// Sends each event to the current connection of every session watching it, in order.
    pub(crate) fn broadcast(&mut self, events: Vec<model_zk::Event>) {
        for event in events {
            for session in self.zk.watchers(&event.path) {
                let Some(&conn) = self.session_conn.get(&session) else {
                    continue;
                };
                if self.links[&conn].alive {
                    self.send_down(
                        conn,
                        Down::Watch {
                            path: event.path.clone(),
                            kind: event.kind,
                        },
                    );
                }
            }
        }
    }

    pub(crate) fn session_check(&mut self, id: i64) {
        let Some(due) = self.zk.expires_at(id) else {
            return;
        };
        if self.now < due {
            self.push(due, Ev::SessionCheck(id));
            return;
        }
        self.stats.expiries += 1;
        let conn = self.session_conn.get(&id).copied();
        let node = conn.map(|c| self.links[&c].node);
        note!(self, node, None, format!("session {id:x} expired"));
        self.end_session(id);
        if let Some(conn) = conn
            && self.links[&conn].alive
        {
            self.send_down(conn, Down::Closed);
        }
    }
}
