//! What a run does: `overlap`, a change while it runs, a program that cannot start, its output.

use std::collections::BTreeSet;

use crate::common::{Scratch, process_alive, wait_for};
use crate::{LIMIT, fired_seconds};

#[test]
fn given_overlap_skip_when_a_run_outlasts_the_period_then_the_next_tick_is_skipped() {
    let scratch = Scratch::new();
    let runs = scratch.out("runs");
    scratch.write_task(
        "long",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $ZKCRON_FIRE_ID >> {runs}; sleep 2.5'\noverlap = \"skip\"\n",
            runs = runs.display()
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("skipped: the previous run is still going", 2, LIMIT);
    wait_for("a second run", LIMIT, || scratch.lines("runs").len() >= 2);
    // Runs never overlap: consecutive runs start at least 3 ticks apart (2.5 s run, 1 s ticks).
    let seconds = fired_seconds(&scratch.lines("runs"));
    assert!(seconds.windows(2).all(|w| w[1] - w[0] >= 3), "{seconds:?}");
}

#[test]
fn given_overlap_replace_when_a_run_outlasts_the_period_then_it_is_stopped_for_the_next() {
    let scratch = Scratch::new();
    let runs = scratch.out("runs");
    let overlaps = scratch.out("overlaps");
    // Each run first notes every earlier run whose process is still alive, then records its
    // fire id and pid, and becomes `sleep 30` under that pid.
    let script = format!(
        "for pid in $(cut -d' ' -f2 {runs} 2>/dev/null); do \
         kill -0 $pid 2>/dev/null && echo \"$ZKCRON_FIRE_ID started while $pid ran\" >> {overlaps}; \
         done; echo \"$ZKCRON_FIRE_ID $$\" >> {runs}; exec sleep 30",
        runs = runs.display(),
        overlaps = overlaps.display()
    );
    scratch.write_task(
        "replaced",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = '''{script}'''\noverlap = \"replace\"\n\
             kill_grace = \"1s\"\n"
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("replacing the running run", LIMIT);
    daemon.wait_for_log("status=stopped", LIMIT);
    wait_for("the run after the replaced one to start", LIMIT, || {
        scratch.lines("runs").len() >= 2
    });

    let started = scratch.lines("runs");
    let seconds = fired_seconds(&started);
    assert!(seconds[0] < seconds[1], "{started:?}");
    // The first run was stopped (it would have slept 30 s), and the stopped run was it.
    let (first, first_pid) = started[0].split_once(' ').expect("fire id and pid");
    assert!(!process_alive(first_pid.parse().unwrap()), "{started:?}");
    let log = daemon.log();
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("fire_id={first}")) && l.contains("status=stopped")),
        "{log}"
    );
    // Each run started only once the run it replaced was gone.
    assert_eq!(scratch.lines("overlaps"), Vec::<String>::new(), "{log}");
}

#[test]
fn given_a_change_while_a_run_is_going_when_reloaded_then_the_run_finishes() {
    let scratch = Scratch::new();
    let started = scratch.out("started");
    let finished = scratch.out("finished");
    let task = |marker: &str| {
        format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo {marker} >> {started}; sleep 2; echo {marker} >> {finished}'\n",
            started = started.display(),
            finished = finished.display()
        )
    };
    scratch.write_task("changing", &task("v1"));
    let daemon = scratch.start_daemon(&[]);
    wait_for("the v1 run to start", LIMIT, || {
        !scratch.lines("started").is_empty()
    });
    scratch.write_task("changing", &task("v2"));
    daemon.wait_for_log("task changed; a run in progress finishes", LIMIT);
    wait_for("the v1 run to finish", LIMIT, || {
        scratch.lines("finished").contains(&"v1".to_string())
    });
    scratch.remove_task("changing");
    daemon.wait_for_log("task removed", LIMIT);
    let started_count = scratch.lines("started").len();
    wait_for("every started run to finish after removal", LIMIT, || {
        scratch.lines("finished").len() >= started_count
    });
}

/// Regression: a tick whose process cannot be prepared is claimed and recorded as a failed
/// run with the reason and its fix, once, and nothing is spawned.
#[test]
fn given_a_missing_program_when_its_ticks_come_then_each_fails_once_with_the_fix_in_the_log() {
    let scratch = Scratch::new();
    scratch.write_task(
        "missing",
        "schedule = \"* * * * * *\"\ncommand = ['zkcron-no-such-program', '--flag']\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("not found in PATH", 2, LIMIT);

    let log = daemon.log();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not found in PATH"))
        .collect();
    for line in &failures {
        assert!(line.contains("finished"), "{line}");
        assert!(
            line.contains("install it, or give its full path in `command`"),
            "{line}"
        );
    }
    let fire_ids: Vec<&str> = failures
        .iter()
        .map(|l| {
            let at = l.find("missing@").expect("names the fire id");
            l[at..].split([' ', '"']).next().unwrap()
        })
        .collect();
    let distinct: BTreeSet<&&str> = fire_ids.iter().collect();
    assert_eq!(
        distinct.len(),
        fire_ids.len(),
        "logged twice: {failures:#?}"
    );
    assert!(
        !log.contains("zkcron::executor: started"),
        "nothing was spawned: {log}"
    );
}

/// Regression: a job printing 2,000 lines per run flooded the log; then (review) the cap
/// kept only the head, and the job's last line was never logged.
#[test]
fn given_job_output_lines_when_a_job_prints_more_then_the_rest_is_counted_in_one_line() {
    let scratch = Scratch::new();
    scratch.write_config("[log]\njob_output_lines = 3\n");
    scratch.write_task(
        "chatty",
        "schedule = \"* * * * * *\"\ncommand = 'seq 1 2000; echo done >&2'\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("output not logged past [log] job_output_lines", LIMIT);
    let summary = daemon
        .log()
        .lines()
        .find(|l| l.contains("output not logged past"))
        .unwrap()
        .to_owned();
    let fire_id = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("fire_id="))
        .unwrap()
        .to_owned();
    // The tail follows the summary; "finished" follows the tail.
    wait_for("the attempt to finish", LIMIT, || {
        daemon
            .log()
            .lines()
            .any(|l| l.contains(&fire_id) && l.contains("finished"))
    });
    drop(daemon);

    let log = std::fs::read_to_string(scratch.path().join("log.txt")).unwrap();
    assert!(summary.contains("lines_left_out=1998"), "{summary}");
    assert!(summary.contains("tail_lines=2"), "{summary}");
    let output: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&fire_id) && l.contains("stream="))
        .collect();
    assert_eq!(output.len(), 3, "{output:#?}");
    // The first line read, then the last lines, the last of each stream among them. Which pipe
    // is read first is up to the reader when the job has already written both (a fast job
    // spawned before its reader is first polled): stdout's `1`, or stderr's `done`, whose
    // stream then has nothing left for the tail.
    let has = |line: &str, text: &str| line.contains(&format!("zkcron::job: {text} "));
    if has(output[0], "done") {
        assert!(
            has(output[1], "1999") && has(output[2], "2000"),
            "{output:#?}"
        );
    } else {
        assert!(has(output[0], "1"), "{output:#?}");
        assert!(output[1..].iter().any(|l| has(l, "2000")), "{output:#?}");
        assert!(output[1..].iter().any(|l| has(l, "done")), "{output:#?}");
    }
}
