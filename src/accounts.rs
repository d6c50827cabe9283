//! Who zkcron runs as, and looking up the users and groups that task files and the config name.

/// The identity of the process that loads task files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    /// The user name of `uid`.
    pub user_name: String,
}

impl Identity {
    /// The identity of the running process.
    pub fn current() -> Identity {
        let uid = nix::unistd::Uid::current();
        let user_name = nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        Identity {
            uid: uid.as_raw(),
            user_name,
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

pub(crate) fn user_exists(name: &str) -> nix::Result<bool> {
    nix::unistd::User::from_name(name).map(|u| u.is_some())
}

/// The message and help when a user or group cannot be found on this host.
pub(crate) fn missing_account(
    kind: &str,
    name: &str,
    exists: nix::Result<bool>,
) -> Option<(String, String)> {
    match exists {
        Ok(true) => None,
        Ok(false) => Some((
            format!("{kind} {name:?} does not exist on this host"),
            format!("create the {kind}, or fix the name"),
        )),
        Err(error) => Some((
            format!("cannot look up {kind} {name:?}: {error}"),
            "check the host's user database (NSS)".to_string(),
        )),
    }
}
