//! One attempt's process: who it runs as, its clean environment, `argv[0]` resolved in its
//! `PATH`, its working directory, the command built from them, and the guard that kills its
//! process group.

use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chrono::SecondsFormat;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Gid, Group, Pid, Uid, User};
use tokio::time::Instant;

use super::{DEFAULT_PATH, RunRequest};
use crate::accounts::Identity;
use crate::task::CommandLine;

/// Which identity a run gets, decided from who we are and what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserAction {
    /// Run with the daemon's own credentials.
    RunAsSelf,
    /// Switch credentials in the child before exec (only when we are root).
    Switch {
        user: String,
        /// `None` uses the user's primary group.
        group: Option<String>,
    },
    /// Do not start; the reason for the user.
    Refuse(String),
}

/// Decides how to honour `user` and `group`, given our identity `me` and our primary group's name
/// `my_group`. Root may switch to anyone; anyone else may only name themselves.
pub fn decide_user(
    me: &Identity,
    my_group: &str,
    user: Option<&str>,
    group: Option<&str>,
) -> UserAction {
    if me.is_root() {
        return match (user, group) {
            (None, None) => UserAction::RunAsSelf,
            (user, group) => UserAction::Switch {
                user: user.unwrap_or(&me.user_name).to_owned(),
                group: group.map(str::to_owned),
            },
        };
    }
    if let Some(user) = user.filter(|u| *u != me.user_name) {
        return UserAction::Refuse(format!(
            "cannot run as user \"{user}\": zkcron is not running as root"
        ));
    }
    if let Some(group) = group.filter(|g| *g != my_group) {
        return UserAction::Refuse(format!(
            "cannot run as group \"{group}\": zkcron is not running as root"
        ));
    }
    UserAction::RunAsSelf
}

/// Credentials the child switches to before exec, resolved in the parent so that the child only
/// makes async-signal-safe system calls.
#[derive(Debug)]
struct Credentials {
    uid: Uid,
    gid: Gid,
    /// Supplementary groups, as `initgroups` would set them.
    groups: Vec<Gid>,
}

/// One attempt's process setup, resolved before spawning.
#[derive(Debug)]
pub(super) struct ProcessSetup {
    /// The child's whole environment, in the order later entries override earlier ones.
    env: Vec<(String, OsString)>,
    /// Checked to exist, so a bad directory is reported as such rather than as a missing binary.
    working_dir: PathBuf,
    /// `None` keeps the daemon's own credentials.
    credentials: Option<Credentials>,
    /// The program with a `/` in it: resolved against the child's `PATH` here, as `execvp`
    /// would, so that std can spawn with `posix_spawn` (vfork) instead of `fork`. A fork of a
    /// daemon holding thousands of tasks copies its page tables, which costs milliseconds.
    program: PathBuf,
}

/// The daemon's own user, group, passwd entry and `LANG`. They do not change while it runs, so they are
/// looked up once instead of reading the user and group databases on every spawn.
struct Myself {
    identity: Identity,
    group: String,
    account: Option<User>,
    /// The daemon's `LANG`, passed on to every child.
    lang: Option<OsString>,
}

static MYSELF: std::sync::OnceLock<Myself> = std::sync::OnceLock::new();

fn myself() -> &'static Myself {
    MYSELF.get_or_init(|| {
        let gid = Gid::current();
        Myself {
            identity: Identity::current(),
            group: Group::from_gid(gid)
                .ok()
                .flatten()
                .map(|g| g.name)
                .unwrap_or_else(|| gid.to_string()),
            account: User::from_uid(Uid::current()).ok().flatten(),
            lang: std::env::var_os("LANG"),
        }
    })
}

/// Whether preparing `request` reads the user and group databases: when it switches user or
/// group, and the first time, when the daemon's own entries are looked up. Otherwise it only
/// checks the working directory and `argv[0]` (a few `stat`s of paths that the spawn walks
/// again anyway) and builds the environment.
pub(super) fn reads_account_databases(request: &RunRequest) -> bool {
    let Some(me) = MYSELF.get() else {
        return true;
    };
    matches!(
        decide_user(
            &me.identity,
            &me.group,
            request.user.as_deref(),
            request.group.as_deref(),
        ),
        UserAction::Switch { .. }
    )
}

/// Resolves user, group, environment and working directory. Blocking: it reads the user and
/// group databases (see [`reads_account_databases`]) and the file system.
pub(super) fn resolve_process(
    request: &RunRequest,
    attempt: u32,
    program: &str,
) -> Result<ProcessSetup, String> {
    let Myself {
        identity: me,
        group: my_group,
        account: my_account,
        lang,
    } = myself();
    let action = decide_user(
        me,
        my_group,
        request.user.as_deref(),
        request.group.as_deref(),
    );

    // The daemon's own entry is borrowed: only its home and name are copied, not the whole
    // passwd entry on every run.
    let (home, user_name, credentials) = match action {
        UserAction::Refuse(reason) => return Err(reason),
        UserAction::RunAsSelf => match my_account {
            Some(account) => (account.dir.clone(), account.name.clone(), None),
            // Without a passwd entry we still give the child something sensible.
            None => (
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from),
                me.user_name.clone(),
                None,
            ),
        },
        UserAction::Switch { user, group } => {
            let (account, credentials) = switch_credentials(&user, group.as_deref())?;
            (account.dir, account.name, Some(credentials))
        }
    };
    let env = child_env(request, attempt, &home, user_name, lang.as_ref());
    let working_dir = working_dir(request, home)?;

    let path = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    let program = resolve_program(program, &path, &working_dir)?;

    Ok(ProcessSetup {
        env,
        working_dir,
        credentials,
        program,
    })
}

/// The account of `user` and the credentials to run as it: its uid, `group`'s gid (`None`: the
/// user's primary group) and the user's supplementary groups.
fn switch_credentials(user: &str, group: Option<&str>) -> Result<(User, Credentials), String> {
    let account = match User::from_name(user) {
        Ok(Some(account)) => account,
        Ok(None) => {
            return Err(format!(
                "unknown user \"{user}\"; create it, or change `user` in the task file \
                 (or [scheduler] default_user)"
            ));
        }
        Err(e) => return Err(format!("cannot look up user \"{user}\": {e}")),
    };
    let gid = match group {
        None => account.gid,
        Some(group) => match Group::from_name(group) {
            Ok(Some(found)) => found.gid,
            Ok(None) => {
                return Err(format!(
                    "unknown group \"{group}\"; create it, or change `group` in the task file"
                ));
            }
            Err(e) => return Err(format!("cannot look up group \"{group}\": {e}")),
        },
    };
    let name = CString::new(account.name.as_bytes())
        .map_err(|_| format!("invalid user name \"{user}\""))?;
    let groups = nix::unistd::getgrouplist(&name, gid)
        .map_err(|e| format!("cannot list the supplementary groups of user \"{user}\": {e}"))?;
    let credentials = Credentials {
        uid: account.uid,
        gid,
        groups,
    };
    Ok((account, credentials))
}

/// The child's environment: a login's basics (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, and
/// the daemon's `LANG`), the `ZKCRON_*` variables of this run, then the task's `env`, which
/// overrides any of them.
fn child_env(
    request: &RunRequest,
    attempt: u32,
    home: &Path,
    user_name: String,
    lang: Option<&OsString>,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), home.as_os_str().to_owned()),
        ("USER".into(), user_name.clone().into()),
        ("LOGNAME".into(), user_name.into()),
        ("SHELL".into(), "/bin/sh".into()),
    ];
    if let Some(lang) = lang {
        env.push(("LANG".into(), lang.clone()));
    }
    let scheduled_at = request
        .scheduled_at
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    env.extend([
        ("ZKCRON_TASK".into(), request.task.clone().into()),
        ("ZKCRON_SCHEDULED_AT".into(), scheduled_at.into()),
        ("ZKCRON_FIRE_ID".into(), request.fire_id.clone().into()),
        ("ZKCRON_NODE".into(), request.node_id.clone().into()),
        ("ZKCRON_ATTEMPT".into(), attempt.to_string().into()),
    ]);
    env.extend(
        request
            .env
            .iter()
            .map(|(k, v)| (k.clone(), OsString::from(v))),
    );
    env
}

/// Where the child starts: the task's `working_dir`, which must exist, or else the user's home
/// if it exists, or else `/`.
fn working_dir(request: &RunRequest, home: PathBuf) -> Result<PathBuf, String> {
    match &request.working_dir {
        Some(dir) if dir.is_dir() => Ok(dir.clone()),
        Some(dir) => Err(format!(
            "working directory {} does not exist or is not a directory; create it, or \
             change `working_dir` in the task file",
            dir.display()
        )),
        None if home.is_dir() => Ok(home),
        None => Ok(PathBuf::from("/")),
    }
}

/// Finds `program` in `path` as `execvp` does, and checks that it is an executable file, so that
/// a missing program is found before the tick is claimed. A name with a `/` is used as it is,
/// relative to `working_dir` when it is relative (where the child starts).
fn resolve_program(
    program: &str,
    path: &std::ffi::OsStr,
    working_dir: &std::path::Path,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &std::path::Path| {
        candidate
            .metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = working_dir.join(program);
        if executable(&candidate) {
            // As written: the child resolves a relative path after changing to `working_dir`.
            return Ok(PathBuf::from(program));
        }
        let what = if candidate.exists() {
            "not an executable file"
        } else {
            "no such file"
        };
        return Err(format!(
            "cannot execute \"{program}\": {what}; install it, or fix the path in `command`"
        ));
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| {
            format!(
                "cannot execute \"{program}\": not found in PATH ({}); install it, or give its \
                 full path in `command`",
                path.to_string_lossy()
            )
        })
}

/// The program and arguments of a command line.
pub(super) fn program_and_args(command: &CommandLine) -> Result<(&str, Vec<&str>), String> {
    match command {
        CommandLine::Argv(argv) => match argv.split_first() {
            Some((program, args)) => Ok((program, args.iter().map(String::as_str).collect())),
            None => Err("the command is empty".to_owned()),
        },
        CommandLine::Shell(script) => Ok(("/bin/sh", vec!["-c", script])),
    }
}

/// Builds the command: own process group, clean environment, stdin from `/dev/null`, output
/// piped, credentials switched in the child.
pub(super) fn build_command(
    program: &str,
    args: &[&str],
    prepared: ProcessSetup,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&prepared.program);
    command
        // argv[0] stays as written, as `execvp` leaves it.
        .arg0(program)
        .args(args)
        .env_clear()
        .envs(prepared.env)
        .current_dir(&prepared.working_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // If the run is dropped mid-way the group guard kills the group; this reaps the child.
        .kill_on_drop(true);
    if let Some(credentials) = prepared.credentials {
        // SAFETY: the closure runs in the forked child before exec. It only makes the
        // async-signal-safe system calls setgroups, setgid and setuid on data allocated in the
        // parent, and builds an `io::Error` from an errno, which does not allocate.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setgroups(&credentials.groups)?;
                nix::unistd::setgid(credentials.gid)?;
                nix::unistd::setuid(credentials.uid)?;
                Ok(())
            });
        }
    }
    command
}

/// Kills the process group of a spawned child if the run future is dropped before the child was
/// reaped, so that cancelling a run never leaks processes.
#[derive(Debug)]
pub(super) struct GroupGuard {
    /// The group id, the main child's pid; `None` once the child was reaped.
    pub(super) pgid: Option<Pid>,
}

impl GroupGuard {
    pub(super) fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, signal);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Sends SIGTERM to the group and schedules its SIGKILL `grace` from now, unless one is due
/// earlier.
pub(super) fn terminate_group(guard: &GroupGuard, grace: Duration, kill_at: &mut Option<Instant>) {
    guard.signal(Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    *kill_at = Some(kill_at.map_or(deadline, |earlier| earlier.min(deadline)));
}

/// Sends `signal` to a process group; a group that is already gone is not an error.
fn signal_group(pgid: Pid, signal: Signal) {
    match killpg(pgid, signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid = pgid.as_raw(), %signal, "cannot signal process group: {e}"),
    }
}
