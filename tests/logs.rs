//! A run's output kept by the node that ran it, on the embedded backend: `zkcron logs` prints
//! a run's lines and end (and `history` the last lines of a failure), `--follow` streams a run
//! still going, a run whose daemon was killed shows what it wrote, marked incomplete, and the
//! HTTP API serves output only with a token. (In a cluster: `tests/cluster/logs.rs`.)
// Real daemons and processes against the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{
    Scratch, admin_token_file, http_get, http_request, lines_of, next_line, wait_for, zkcron,
};

const LIMIT: Duration = Duration::from_secs(30);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The fire ids of `task`'s runs whose output this scratch's daemon keeps.
fn kept_runs(scratch: &Scratch, task: &str) -> Vec<String> {
    std::fs::read_dir(scratch.path().join("state/output").join(task))
        .map(|dir| {
            dir.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn zkcron_logs_prints_a_runs_output_and_history_keeps_a_failures_last_lines() {
    let scratch = Scratch::new();
    let once = scratch.out("once");
    scratch.write_task(
        "report",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {once} ] && exit 0; touch {once}; echo \"rows: 42\"; sleep 0.3; echo \"disk <full>\" >&2; exit 3'\n",
            once = once.display()
        ),
    );
    let _daemon = scratch.start_daemon(&[]);
    let mut failed = None;
    wait_for("the failing run in the history", LIMIT, || {
        let out = scratch.cli(&["history", "report", "--json"]);
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        failed = runs
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["success"] == false).cloned());
        failed.is_some()
    });
    let failed = failed.unwrap();
    let fire_id = failed["fire_id"].as_str().unwrap();
    // Both streams' last lines go with the failure's result (the two pipes are read side by
    // side: the job waits between them, so that their order is the order written).
    let tail = failed["output_tail"].as_str().unwrap();
    assert!(
        tail.contains("rows: 42") && tail.contains("disk <full>"),
        "{failed}"
    );

    let out = scratch.cli(&["logs", "report", fire_id]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "rows: 42\ndisk <full>\n");
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("run {fire_id} on node test-node ended at "))
            && said.contains(": exit code 3"),
        "{said}"
    );
    let out = scratch.cli(&["logs", "report", fire_id, "--timestamps"]);
    let lines = text(&out.stdout);
    assert!(
        lines.lines().any(|l| l.ends_with("Z stdout rows: 42"))
            && lines.lines().any(|l| l.ends_with("Z stderr disk <full>")),
        "{lines}"
    );

    // A fire id of another task, and a run not kept, are said as such.
    let out = scratch.cli(&["logs", "report", "other@1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("other@1 is not a run of task report"),
        "{out:?}"
    );
    let out = scratch.cli(&["logs", "report", "report@1"]);
    assert!(
        text(&out.stderr).contains("no output of run report@1 is kept on this host"),
        "{out:?}"
    );
}

#[test]
fn zkcron_logs_follow_streams_a_run_still_going_until_it_ends() {
    let scratch = Scratch::new();
    let (once, release) = (scratch.out("once"), scratch.out("release"));
    scratch.write_task(
        "slow",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {once} ] && exit 0; touch {once}; echo first; \
             while [ ! -e {release} ]; do sleep 0.05; done; echo second'\n",
            once = once.display(),
            release = release.display()
        ),
    );
    let _daemon = scratch.start_daemon(&[]);
    wait_for("the slow run to start", LIMIT, || {
        kept_runs(&scratch, "slow").len() == 1
    });
    let fire_id = kept_runs(&scratch, "slow").remove(0);
    let mut follow = zkcron()
        .args(["logs", "slow", &fire_id, "--follow", "--config"])
        .arg(scratch.path().join("zkcron.toml"))
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(follow.stdout.take().unwrap());
    let line = |what: &str| next_line(&lines, what, LIMIT);
    assert_eq!(line("the first line").as_deref(), Some("first"));
    // Still following: the run goes on until the test lets it end.
    std::fs::write(&release, "").unwrap();
    assert_eq!(line("the second line").as_deref(), Some("second"));
    assert_eq!(
        line("the end of --follow"),
        None,
        "--follow ends with the run"
    );
    let out = follow.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains(": exit code 0"), "{out:?}");
}

/// A run that has printed nothing yet has its file from its start: `logs` says it goes on,
/// and shows what it prints later (regression: the file came with the first output, so a
/// silent run looked like one this node never ran).
#[test]
fn a_silent_run_still_going_is_shown_as_going() {
    let scratch = Scratch::new();
    let (once, release) = (scratch.out("once"), scratch.out("release"));
    scratch.write_task(
        "quiet",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {once} ] && exit 0; touch {once}; \
             while [ ! -e {release} ]; do sleep 0.05; done; echo late'\n",
            once = once.display(),
            release = release.display()
        ),
    );
    let _daemon = scratch.start_daemon(&[]);
    wait_for("the quiet run to start", LIMIT, || {
        kept_runs(&scratch, "quiet").len() == 1
    });
    let fire_id = kept_runs(&scratch, "quiet").remove(0);
    let out = scratch.cli(&["logs", "quiet", &fire_id]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("is still going (--follow streams it)"),
        "{out:?}"
    );
    std::fs::write(&release, "").unwrap();
    wait_for("the quiet run to end", LIMIT, || {
        let out = scratch.cli(&["logs", "quiet", &fire_id]);
        text(&out.stdout) == "late\n" && text(&out.stderr).contains(": exit code 0")
    });
}

#[test]
fn a_run_whose_daemon_was_killed_shows_what_it_wrote_marked_incomplete() {
    let scratch = Scratch::new();
    let (once, pid) = (scratch.out("once"), scratch.out("pid"));
    scratch.write_task(
        "cut",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {once} ] && exit 0; touch {once}; echo $$ > {pid}; echo before the kill; exec sleep 60'\n",
            once = once.display(),
            pid = pid.display()
        ),
    );
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("the run to print", LIMIT, || {
        kept_runs(&scratch, "cut").iter().any(|id| {
            std::fs::read_to_string(scratch.path().join("state/output/cut").join(id))
                .is_ok_and(|t| t.contains("before the kill"))
        })
    });
    daemon.signal(nix::sys::signal::Signal::SIGKILL);
    daemon.wait_exit(LIMIT);
    let job: i32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(job), nix::sys::signal::SIGKILL);

    let out = scratch.cli(&["logs", "cut"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "before the kill\n");
    assert!(
        text(&out.stderr).contains("incomplete: node test-node stopped before run cut@"),
        "{out:?}"
    );
}

#[test]
fn output_over_http_needs_the_read_or_the_admin_token() {
    let scratch = Scratch::new();
    let admin = admin_token_file(scratch.path(), "admin-token-0123456789");
    let read = scratch.path().join("read.token");
    std::fs::write(&read, "read-token-0123456789\n").unwrap();
    std::fs::set_permissions(&read, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    scratch.write_config(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\nadmin_token_file = \"{}\"\nread_token_file = \"{}\"\n",
        admin.display(),
        read.display()
    ));
    let once = scratch.out("once");
    scratch.write_task(
        "secret",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = '[ -e {once} ] && exit 0; touch {once}; echo hunter$((1+1)); exit 1'\n",
            once = once.display()
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();
    wait_for("the run to end", LIMIT, || {
        kept_runs(&scratch, "secret").iter().any(|id| {
            std::fs::read_to_string(scratch.path().join("state/output/secret").join(id))
                .is_ok_and(|t| t.contains(" x exit code 1"))
        })
    });
    let fire_id = kept_runs(&scratch, "secret")
        .into_iter()
        .find(|id| {
            std::fs::read_to_string(scratch.path().join("state/output/secret").join(id))
                .is_ok_and(|t| t.contains("hunter2"))
        })
        .unwrap();
    let path = format!("/api/runs/{fire_id}/output");
    let get = |headers: &[(&str, &str)]| http_request(&address, "GET", &path, headers, "");

    let (code, body) = get(&[]);
    assert_eq!(code, 401, "{body}");
    assert!(
        body.contains("a run's output needs a token") && !body.contains("hunter2"),
        "{body}"
    );
    let (code, body) = get(&[("Authorization", "Bearer wrong-token-0123456789")]);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("wrong token"), "{body}");
    for token in ["read-token-0123456789", "admin-token-0123456789"] {
        let (code, body) = get(&[("Authorization", &format!("Bearer {token}"))]);
        assert_eq!(code, 200, "{body}");
        assert!(
            body.starts_with(&format!("zkcron-output 1 {fire_id} test-node\n")),
            "{body}"
        );
        assert!(
            body.contains(" o hunter2\n") && body.contains(" x exit code 1\n"),
            "{body}"
        );
    }
    let (code, body) = get(&[("Authorization", "Bearer read-token-0123456789")]);
    assert_eq!(code, 200);
    let (code, missing) = http_request(
        &address,
        "GET",
        "/api/runs/secret@1/output",
        &[("Authorization", "Bearer read-token-0123456789")],
        "",
    );
    assert_eq!(code, 404, "{missing}");
    assert!(
        missing.contains("keeps no output of run secret@1"),
        "{missing}"
    );
    drop(body);

    // The failure's stored last lines (the secret the job printed, not its command's text):
    // never in the history the API serves without a token,
    // and served with one when the node's file is gone.
    wait_for("the failure in the history", LIMIT, || {
        let (_, task) = http_get(&address, "/api/tasks/secret");
        let task: serde_json::Value = serde_json::from_str(&task).unwrap_or_default();
        task["history"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|run| run["fire_id"] == fire_id.as_str()))
    });
    let (code, task) = http_get(&address, "/api/tasks/secret");
    assert_eq!(code, 200, "{task}");
    assert!(
        !task.contains("hunter2") && !task.contains("output_tail"),
        "{task}"
    );
    std::fs::remove_file(scratch.path().join("state/output/secret").join(&fire_id)).unwrap();
    let (code, stored) = get(&[("Authorization", "Bearer read-token-0123456789")]);
    assert_eq!(code, 200, "{stored}");
    assert!(
        stored.starts_with(&format!("zkcron-output 1 {fire_id} test-node\n")),
        "{stored}"
    );
    assert!(
        stored.contains(" o hunter2\n") && stored.contains(" x exit 1\n"),
        "{stored}"
    );
    let (code, refused) = get(&[]);
    assert_eq!(code, 401, "{refused}");
}

#[test]
fn without_a_token_file_output_is_not_served_over_http() {
    let scratch = Scratch::new();
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let daemon = scratch.start_daemon(&[]);
    let (code, body) = http_request(
        &daemon.served_address(),
        "GET",
        "/api/runs/t@1/output",
        &[("Authorization", "Bearer anything-at-all-0123")],
        "",
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("set [http] read_token_file"), "{body}");
}
