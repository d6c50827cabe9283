//! The dashboard and the HTTP API of a real daemon, in headless Chromium: against the embedded
//! backend and a real 3-node cluster, the overview names every task and its leader, a task page
//! lists its runs, the filter narrows the table, a task file's markup shows as text, no console
//! error, a change works with the admin token and is refused without it, a backfill from the
//! task page shows its progress and runs, a run's page shows its output (read with the token
//! from the node that ran it) as text, and a read right after a change shows it.
//! Screenshots go to `target/dashboard/`. The API's refusals (no token file, no token, wrong token, not JSON),
//! a backfill through the API, a pool's items on the task page and the token file's checks are
//! tested without a browser.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use common::browser::Browser;
use common::cluster::Cluster;
use common::{
    Scratch, Served, admin_token_file, http_config, http_get, http_request, run_zkcron, wait_for,
};
use serde_json::Value;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const LIMIT: Duration = Duration::from_secs(30);

/// A description only a browser that treats it as markup would act on.
const EVIL: &str = "<script>alert(1)</script><img src=x onerror=\"console.error('xss')\">";

fn every_second(name: &str) -> String {
    format!("schedule = \"* * * * * *\"\ncommand = \"true\"\ndescription = '''{name} {EVIL}'''\n")
}

const DAILY: &str =
    "schedule = \"30 2 * * *\"\ntimezone = \"Europe/Paris\"\ncommand = [\"true\"]\n";

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/dashboard")
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn post(address: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let (code, body) = http_request(address, "POST", path, &headers, body);
    (code, json(&body))
}

/// The overview's task rows as (task, leader) as the browser shows them.
fn task_rows(browser: &Browser) -> Vec<(String, String)> {
    let rows = browser.execute(
        "return Array.from(document.querySelectorAll('#tasks-table tbody tr'))
            .filter(r => !r.hidden)
            .map(r => [r.cells[0].innerText, r.cells[2].innerText]);",
        vec![],
    );
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect()
}

/// What every dashboard test checks in the browser, against the endpoint at `address` whose
/// tasks `tick` (every second, failing never) and `backup` are led by `leaders`.
fn check_in_browser(browser: &Browser, address: &str, leaders: &[(&str, &str)], name: &str) {
    browser.goto(&format!("http://{address}/"));
    wait_for(
        "the overview to list every task with its leader",
        LIMIT,
        || {
            let rows = task_rows(browser);
            leaders
                .iter()
                .all(|(task, leader)| rows.contains(&(task.to_string(), leader.to_string())))
        },
    );
    browser.screenshot(&screenshots().join(format!("{name}-overview.png")));
    // It stays current without a reload: tick's last run (every second) moves on by itself.
    let last_run = "return Array.from(document.querySelectorAll('#tasks-table tbody tr'))
        .find(r => r.cells[0].innerText === 'tick').cells[5].innerText;";
    let before = browser.execute(last_run, vec![]);
    wait_for("the overview to refresh itself", LIMIT, || {
        browser.execute(last_run, vec![]) != before
            && browser.text_of("#refreshed").starts_with("updated")
    });

    // The filter keeps the rows whose text has the word: backup, and load where it is defined
    // (it runs after backup: its Schedule cell says so).
    browser.type_into("#filter", "backup");
    let rows = task_rows(browser);
    let names: Vec<&str> = rows.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        names.first() == Some(&"backup") && names[1..].iter().all(|n| *n == "load"),
        "the filter left {rows:?}"
    );

    browser.goto(&format!("http://{address}/tasks/tick"));
    wait_for("the task page to list tick's runs", LIMIT, || {
        browser.text_of("#history-table tbody").contains("tick@")
    });
    // The strip of its recent ticks: a cell per entry, coloured by outcome, what became of it
    // (here a run's fire id) in its title.
    let ran = browser.execute(
        "return Array.from(document.querySelectorAll('#tick-strip .tick.ran')).map(c => c.title);",
        vec![],
    );
    assert!(
        ran.as_array().is_some_and(|titles| !titles.is_empty()
            && titles
                .iter()
                .all(|t| t.as_str().unwrap().starts_with("ran 1 tick(s) ")
                    && t.as_str().unwrap().contains("tick@"))),
        "{ran}"
    );
    let definition = browser.text_of("#definition + dl");
    assert!(
        definition.contains(EVIL),
        "the description as text: {definition}"
    );
    assert_eq!(
        browser.execute(
            "return document.querySelectorAll('main img, main script').length;",
            vec![]
        ),
        0
    );
    assert_eq!(browser.open_dialog(), None, "a dialog opened");
    browser.screenshot(&screenshots().join(format!("{name}-task.png")));
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// A daily task whose runs take a second: a backfill of it is seen running.
const SLOW_DAILY: &str =
    "schedule = \"0 4 * * *\"\ntimezone = \"UTC\"\ncommand = [\"sleep\", \"1\"]\n";

/// Backfills `slow` from its page, behind the token prompt (the token is kept in the tab
/// since the pause): a range without its start is refused with the API's message; a range of
/// two ticks shows done of total while it runs, then its two runs in the history.
fn backfill_from_the_page(browser: &Browser, address: &str) {
    browser.goto(&format!("http://{address}/tasks/slow"));
    assert!(
        browser.text_of("main").contains("No backfill is running."),
        "{}",
        browser.text_of("main")
    );
    browser.type_into("#to", "2026-01-03T00:00:00Z");
    browser.click("button[value=backfill]");
    wait_result(
        browser,
        "a range without its start to be refused",
        "Refused (400): a backfill needs \"from\"",
    );
    browser.type_into("#from", "2026-01-01T00:00:00Z");
    browser.click("button[value=backfill]");
    wait_result(
        browser,
        "the backfill to be requested",
        "task slow: backfill of 2 tick(s) in [2026-01-01T00:00:00Z, 2026-01-03T00:00:00Z) requested",
    );
    wait_for("the page to show the backfill's progress", LIMIT, || {
        browser.text_of("#backfills-table tbody").contains(" of 2")
    });
    let backfilled = "return Array.from(document.querySelectorAll('#history-table tbody tr'))
        .filter(r => r.cells[8].innerText === 'backfill').map(r => r.cells[1].innerText).sort();";
    wait_for("both backfilled runs in the page's history", LIMIT, || {
        browser.execute(backfilled, vec![])
            == serde_json::json!(["2026-01-01T04:00:00Z", "2026-01-02T04:00:00Z"])
    });
    wait_for("the page to show the backfill done", LIMIT, || {
        browser.text_of("main").contains("No backfill is running.")
    });
    browser.screenshot(&screenshots().join("local-backfill.png"));
    let errors = browser.console_errors();
    // The refused POST is logged by the browser as a failed resource (400): that one only.
    assert!(
        errors.iter().all(|e| e.contains("400")),
        "console errors: {errors:?}"
    );
}

/// `load` runs after `backup`, paused by now: load's page says its parent is not firing and
/// links to it, and backup's page links back to its child.
fn chain_links_on_the_pages(browser: &Browser, address: &str) {
    browser.goto(&format!("http://{address}/tasks/load"));
    wait_for("load's page to give its parent's state", LIMIT, || {
        browser
            .text_of("#links + dl")
            .contains("backup — not firing: paused: maintenance window")
    });
    browser.click("#links + dl a[href='/tasks/backup']");
    wait_for("the parent's page to link to its child", LIMIT, || {
        browser.execute(
            "return document.querySelectorAll(\"#links + dl a[href='/tasks/load']\").length;",
            vec![],
        ) == 1
    });
    assert_eq!(browser.text_of("main h1"), "Task backup");
}

/// Waits until the page's action result says `needle`; fails naming `what` after [`LIMIT`].
fn wait_result(browser: &Browser, what: &str, needle: &str) {
    wait_for(what, LIMIT, || {
        browser.text_of("#action-result").contains(needle)
    });
}

/// A task with `max_runs` and calendars, and a one-shot, on their pages: the runs counted, the
/// calendars named, the state done (the calendar's name comes from a file: shown as text).
fn limits_on_the_pages(browser: &Browser, served: &Served) {
    let scratch = &served.scratch;
    let calendars = scratch.path().join("calendars.d");
    std::fs::create_dir_all(&calendars).unwrap();
    std::fs::set_permissions(&calendars, std::fs::Permissions::from_mode(0o755)).unwrap();
    let calendar = calendars.join("x-b.toml");
    std::fs::write(&calendar, "dates = [\"2000-01-01\"]\n").unwrap();
    std::fs::set_permissions(&calendar, std::fs::Permissions::from_mode(0o644)).unwrap();
    scratch.write_task(
        "limited",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\nmax_runs = 2\nexclude = [\"x-b\"]\n",
    );
    scratch.write_task(
        "once",
        "schedule = \"@at 2020-01-01T00:00:00Z\"\ncommand = \"true\"\ncatch_up = \"skip\"\n",
    );
    let address = &served.address;
    browser.goto(&format!("http://{address}/tasks/limited"));
    wait_for("the limited task to be done", LIMIT, || {
        browser.goto(&format!("http://{address}/tasks/limited"));
        browser
            .text_of("#done")
            .contains("done after 2 runs (max_runs)")
    });
    assert_eq!(browser.text_of("#runs"), "2 of 2 scheduled runs");
    assert!(browser.text_of("#exclude").starts_with("x-b (calendars"));
    browser.goto(&format!("http://{address}/tasks/once"));
    wait_for("the one-shot to be done", LIMIT, || {
        browser.goto(&format!("http://{address}/tasks/once"));
        browser
            .text_of("#done")
            .contains("its one tick, 2020-01-01T00:00:00Z, was not run")
    });
}

/// Pauses `backup` from its page: refused without the token and with a wrong one, done with it.
fn pause_from_the_page(browser: &Browser, address: &str) {
    browser.goto(&format!("http://{address}/tasks/backup"));
    browser.type_into("#reason", "maintenance window");
    browser.click("button[value=pause]");
    wait_result(
        browser,
        "the page to ask for the token",
        "Enter the admin token first",
    );
    browser.type_into("#token", "not-the-token-at-all");
    browser.click("button[value=pause]");
    wait_result(browser, "the wrong token to be refused", "Refused (401)");
    let (_, status) = http_get(address, "/api/status");
    assert!(
        !status.contains("\"paused\": true")
            && !json(&status)["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["paused"] == true)
    );

    browser.execute(
        "document.getElementById('token').value = arguments[0];",
        vec![TOKEN.into()],
    );
    browser.click("button[value=pause]");
    wait_result(browser, "the pause to be done", "task backup paused");
    wait_for("the page to show backup paused", LIMIT, || {
        browser.text_of("main").contains("Paused since")
    });
    let (_, status) = http_get(address, "/api/status");
    let backup = json(&status)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "backup")
        .cloned()
        .unwrap();
    assert_eq!(backup["paused"], true, "{backup}");
    let errors = browser.console_errors();
    // The refused POST is logged by the browser as a failed resource (401): that one only.
    assert!(
        errors.iter().all(|e| e.contains("401")),
        "console errors: {errors:?}"
    );
}

/// A task whose every run prints markup on both streams, and a progress line that rewrites
/// itself with a carriage return (the page dropped such lines once), and fails.
const NOISY: &str = "schedule = \"* * * * * *\"\n\
     command = 'echo \"<b>noisy</b> out\"; echo \"<img src=x onerror=console.error(7)> err\" >&2; \
     printf \"progress 50%%\\rprogress 100%%\\n\"; exit 1'\n";

/// A run's page, linked from the task page's history: how it ended and, with the token, its
/// output read from the node that ran it, as text (no markup made of it).
fn run_page_in_the_browser(browser: &Browser, address: &str, name: &str) {
    wait_for("a run of noisy in the API", LIMIT, || {
        let (code, body) = http_get(address, "/api/tasks/noisy");
        code == 200
            && json(&body)["history"]
                .as_array()
                .is_some_and(|h| !h.is_empty())
    });
    wait_for("a run of noisy on its page", LIMIT, || {
        browser.goto(&format!("http://{address}/tasks/noisy"));
        let links = browser.execute(
            "return document.querySelectorAll('#history-table a[href^=\"/runs/\"]').length;",
            vec![],
        );
        links.as_u64().unwrap_or(0) > 0
    });
    browser.click("#history-table a[href^=\"/runs/\"]");
    browser.wait_text("the run's page", LIMIT, |text| {
        text.contains("Run noisy@") && text.contains("exit 1")
    });
    if browser.text_of("#output").is_empty() && browser.text_of("#output-state").contains("token") {
        browser.type_into("#token", TOKEN);
        browser.click("#output-form button[type=submit]");
    }
    browser.wait_text("the run's output", LIMIT, |text| {
        text.contains("<b>noisy</b> out")
            && text.contains("<img src=x onerror=console.error(7)> err")
            && text.contains("progress 100%")
    });
    wait_for("the run's end on its page", LIMIT, || {
        browser.text_of("#output-state").contains("exit code 1")
    });
    let made = browser.execute(
        "return document.querySelectorAll('#output b, #output img').length;",
        vec![],
    );
    assert_eq!(made, 0, "output became markup");
    browser.screenshot(&screenshots().join(format!("{name}-run.png")));
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

#[test]
fn given_the_local_backend_then_the_dashboard_works_in_chromium() {
    let served = Served::start(
        Some(TOKEN),
        &[
            ("tick", &every_second("tick")),
            ("backup", DAILY),
            ("slow", SLOW_DAILY),
            ("load", "after = [\"backup\"]\ncommand = [\"true\"]\n"),
            ("noisy", NOISY),
        ],
    );
    let (daemon, address) = (&served.daemon, &served.address);

    let browser = Browser::start();
    check_in_browser(
        &browser,
        address,
        &[("tick", "test-node"), ("backup", "test-node")],
        "local",
    );
    pause_from_the_page(&browser, address);
    chain_links_on_the_pages(&browser, address);
    backfill_from_the_page(&browser, address);
    run_page_in_the_browser(&browser, address, "local");
    limits_on_the_pages(&browser, &served);
    assert!(
        daemon
            .log()
            .contains("HTTP API: pause task backup for 127.0.0.1:"),
        "{}",
        daemon.log()
    );
    assert!(
        daemon.log().contains("reason: maintenance window"),
        "{}",
        daemon.log()
    );
}

#[test]
fn given_a_three_node_cluster_then_the_dashboard_works_in_chromium() {
    let mut cluster = Cluster::new();
    let token = admin_token_file(cluster.path(), TOKEN);
    cluster.write_task("tick", &every_second("tick"));
    cluster.write_task("backup", DAILY);
    // The same read token on every node: node-b's pages read the runs of node-a with it.
    let read = cluster.path().join("read.token");
    std::fs::write(&read, format!("{TOKEN}-read\n")).unwrap();
    std::fs::set_permissions(&read, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for id in ["node-a", "node-b", "node-c"] {
        let labels = if id == "node-a" {
            "[node]\nlabels = { noisy = \"here\" }\n"
        } else {
            ""
        };
        let node = common::zk::ClusterNode {
            config: format!(
                "{labels}{}read_token_file = \"{}\"\n",
                http_config(Some(&token)),
                read.display()
            ),
            ..cluster.new_node(id)
        };
        cluster.start(node);
    }
    let address = cluster.nodes["node-b"].served_address();
    let leaders = || -> Vec<(String, String)> {
        let (_, body) = http_get(&address, "/api/status");
        json(&body)["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                Some((
                    t["name"].as_str()?.to_string(),
                    t["leader"].as_str()?.to_string(),
                ))
            })
            .collect()
    };
    // Settled: what the API shows is what each node's log says it leads (the leases move
    // while the nodes join, and the API's view may be of a moment in between).
    cluster.wait(
        "both tasks to have a leader, as the nodes say",
        LIMIT,
        |c| {
            let leaders = leaders();
            leaders.len() == 2
                && ["node-a", "node-b", "node-c"].iter().all(|id| {
                    c.leading(id) == Some(leaders.iter().filter(|(_, l)| l == id).count())
                })
        },
    );
    let leaders = leaders();
    let leaders: Vec<(&str, &str)> = leaders
        .iter()
        .map(|(t, l)| (t.as_str(), l.as_str()))
        .collect();

    let browser = Browser::start();
    check_in_browser(&browser, &address, &leaders, "cluster");
    let overview = {
        browser.goto(&format!("http://{address}/"));
        browser.text()
    };
    for id in ["node-a", "node-b", "node-c"] {
        assert!(
            overview.contains(id),
            "{id} missing from the overview:\n{overview}"
        );
    }
    pause_from_the_page(&browser, &address);
    // Its runs are on node-a (its label): node-b's pages read them from there, with its own
    // read token (the browser sends the admin token).
    cluster.write_task(
        "noisy",
        &format!("{NOISY}require_labels = {{ noisy = \"here\" }}\n"),
    );
    run_page_in_the_browser(&browser, &address, "cluster");
    assert!(
        cluster.nodes["node-b"]
            .log()
            .contains("HTTP API: pause task backup for 127.0.0.1:"),
        "{}",
        cluster.logs()
    );

    // Drain and undrain through the API, as `zkcron drain` does.
    let drained = || {
        let (code, body) = http_get(&address, "/api/nodes/node-c");
        assert_eq!(code, 200, "{body}");
        json(&body)["node"]["drained"] == true
    };
    assert!(!drained());
    let (code, answer) = post(&address, "/api/nodes/node-c/drain", None, "{}");
    assert_eq!(code, 401, "{answer}");
    assert!(!drained(), "refused, so nothing changed");
    let (code, answer) = post(&address, "/api/nodes/node-c/drain", Some(TOKEN), "{}");
    assert_eq!(code, 200, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("node node-c drained:"),
        "{answer}"
    );
    // The answer forgot the cached view: the first read after it shows the mark.
    assert!(drained(), "the first read after the drain shows it");
    let (code, answer) = post(&address, "/api/nodes/node-c/undrain", Some(TOKEN), "{}");
    assert_eq!(code, 200, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("node node-c undrained (it was drained since"),
        "{answer}"
    );
    // The undrain answered once node-c's own record said so: the first read shows it.
    assert!(!drained(), "the first read after the undrain shows it");
    assert!(
        cluster.nodes["node-b"]
            .log()
            .contains("HTTP API: drain node node-c for 127.0.0.1:"),
        "{}",
        cluster.logs()
    );
    shows_changes_made_elsewhere(&cluster, &address);
}

/// Changes made elsewhere (a run's result its leader writes, a drain made with the command in a
/// session of its own) show in `/api/status` within a deadline, with no change through this
/// endpoint: its snapshot follows ZooKeeper's watches.
fn shows_changes_made_elsewhere(cluster: &Cluster, address: &str) {
    const SHOWN_WITHIN: Duration = Duration::from_secs(10);
    let status = || {
        let (code, body) = http_get(address, "/api/status");
        assert_eq!(code, 200, "{body}");
        json(&body)
    };
    let last_run_of_tick = || {
        status()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "tick")
            .map(|t| t["last"]["finished_at"].clone())
    };
    let before = last_run_of_tick();
    cluster.wait("a newer run of tick in /api/status", SHOWN_WITHIN, |_| {
        last_run_of_tick().is_some_and(|last| !last.is_null() && Some(&last) != before.as_ref())
    });
    let drained = || {
        status()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == "node-a" && n["drained"] == true)
    };
    for (command, drain) in [("drain", true), ("undrain", false)] {
        cluster.zkcron_ok(&[command, "node-a"]);
        cluster.wait(
            &format!("node-a {command}ed in /api/status"),
            SHOWN_WITHIN,
            |_| drained() == drain,
        );
    }
}

#[test]
fn given_no_admin_token_file_then_every_change_is_refused_with_how_to_enable_it() {
    let served = Served::start(None, &[("backup", DAILY)]);
    let (daemon, address) = (&served.daemon, served.address.as_str());
    for path in [
        "/api/tasks/backup/pause",
        "/api/tasks/backup/trigger",
        "/api/tasks/backup/resume",
        "/api/nodes/test-node/drain",
    ] {
        let (code, answer) = post(address, path, Some(TOKEN), "{}");
        assert_eq!(code, 403, "{path}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.starts_with(
                "changes through the HTTP API are off on this node: set [http] admin_token_file"
            ),
            "{error}"
        );
    }
    let (_, status) = http_get(address, "/api/status");
    assert_eq!(
        json(&status)["tasks"][0]["paused"],
        false,
        "nothing changed"
    );
    assert!(!daemon.log().contains("HTTP API:"), "{}", daemon.log());
    // The overview says so too, and offers no buttons.
    let (code, page) = http_get(address, "/tasks/backup");
    assert_eq!(code, 200);
    assert!(
        page.contains("Changes from this page are off on this node"),
        "{page}"
    );
    assert!(
        !page.contains("button type=\"submit\" value=\"pause\""),
        "{page}"
    );
}

#[test]
fn given_an_admin_token_then_a_change_needs_it_and_json_and_errors_are_json() {
    let served = Served::start(Some(TOKEN), &[("backup", DAILY)]);
    let (daemon, address) = (&served.daemon, served.address.as_str());
    let pause = "/api/tasks/backup/pause";

    let (code, answer) = post(address, pause, None, "{}");
    assert_eq!(code, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer <token>")
    );
    let (code, answer) = post(
        address,
        pause,
        Some("0123456789abcdef0123456789abcdeX"),
        "{}",
    );
    assert_eq!(
        (code, answer["error"].as_str().unwrap()),
        (
            401,
            "wrong admin token: send the one in [http] admin_token_file"
        )
    );
    let bearer = format!("Bearer {TOKEN}");
    let (code, body) = http_request(
        address,
        "POST",
        pause,
        &[("Authorization", &bearer), ("Content-Type", "text/plain")],
        "{}",
    );
    assert_eq!(code, 415, "{body}");
    assert_eq!(
        json(&body)["error"],
        "a change must be sent with `Content-Type: application/json`"
    );
    let (code, answer) = post(address, pause, Some(TOKEN), "reason: none");
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("the body must be a JSON object")
    );
    // A reason `zkcron pause --reason` refuses, the API refuses too, in the same words.
    let (code, answer) = post(address, pause, Some(TOKEN), r#"{"reason": "x\ny"}"#);
    assert_eq!(
        (code, answer["error"].as_str().unwrap()),
        (
            400,
            "\"reason\": the reason spans several lines: write it on one line"
        )
    );
    let (_, status) = http_get(address, "/api/status");
    assert_eq!(
        json(&status)["tasks"][0]["paused"],
        false,
        "nothing changed yet"
    );

    let (code, answer) = post(address, "/api/tasks/nightly/pause", Some(TOKEN), "{}");
    assert_eq!(code, 404, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown task nightly"),
        "{answer}"
    );
    let (code, answer) = post(address, "/api/tasks/backup/explode", Some(TOKEN), "{}");
    assert_eq!(
        (code, answer["error"].as_str().unwrap()),
        (
            404,
            "unknown action \"explode\": POST trigger, backfill, pause or resume"
        )
    );
    let (code, answer) = post(address, "/api/nodes/test-node/drain", Some(TOKEN), "{}");
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("`zkcron drain` is a cluster command")
    );

    let (code, answer) = post(address, pause, Some(TOKEN), r#"{"reason": "disk swap"}"#);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["message"],
        "task backup paused: nothing fires until `zkcron resume backup` (a `zkcron trigger` still runs it)"
    );
    let (_, status) = http_get(address, "/api/status");
    assert_eq!(json(&status)["tasks"][0]["paused"], true);
    // The reason is stored with the pause mark, as `zkcron pause --reason` stores it.
    assert_eq!(
        json(&status)["tasks"][0]["pause"]["reason"],
        "disk swap",
        "{status}"
    );
    let log = daemon.log();
    assert!(
        log.contains("HTTP API: pause task backup for 127.0.0.1:")
            && log.contains("reason: disk swap"),
        "{log}"
    );

    let (code, answer) = post(address, "/api/tasks/backup/trigger", Some(TOKEN), "");
    assert_eq!(code, 200, "{answer}");
    let fire_id = answer["fire_id"].as_str().unwrap().to_string();
    wait_for("the manual run in the task's history", LIMIT, || {
        let (_, detail) = http_get(address, "/api/tasks/backup");
        json(&detail)["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(|r| r["fire_id"] == fire_id.as_str()))
    });
    let (code, answer) = post(address, "/api/tasks/backup/resume", Some(TOKEN), "{}");
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["message"],
        "task backup resumed; the ticks of the paused period are not caught up"
    );

    let (code, body) = http_get(address, "/api/tasks/nightly");
    assert_eq!(code, 404);
    assert!(
        json(&body)["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown task nightly")
    );
    let (code, body) = http_get(address, "/api/nodes/test-node");
    assert_eq!(code, 200);
    assert_eq!(json(&body)["leads"], serde_json::json!(["backup"]));
    let (code, body) = http_get(address, "/api/nodes/elsewhere");
    assert_eq!(
        (code, json(&body)["error"].as_str().unwrap()),
        (404, "unknown node elsewhere: it is not a live member")
    );
}

#[test]
fn given_an_admin_token_then_a_backfill_is_requested_through_the_api_and_its_ticks_run() {
    let served = Served::start(
        Some(TOKEN),
        &[
            ("backup", DAILY),
            ("shards", &format!("{DAILY}work_items = 4\n")),
        ],
    );
    let (daemon, address) = (&served.daemon, served.address.as_str());
    let backfill = "/api/tasks/backup/backfill";

    // Bad bodies are refused with what to send, and request nothing.
    let refused = |body: &str| -> String {
        let (code, answer) = post(address, backfill, Some(TOKEN), body);
        assert_eq!(code, 400, "{body}: {answer}");
        answer["error"].as_str().unwrap().to_string()
    };
    assert_eq!(
        refused(r#"{"from": "2026-01-01T00:00:00Z"}"#),
        r#"a backfill needs "to": send a body such as {"from": "2026-03-08T00:00:00Z", "to": "2026-03-09T00:00:00Z"}"#
    );
    assert_eq!(
        refused(""),
        r#"a backfill needs "from": send a body such as {"from": "2026-03-08T00:00:00Z", "to": "2026-03-09T00:00:00Z"}"#
    );
    let error = refused(r#"{"from": "yesterday", "to": "2026-01-03T00:00:00Z"}"#);
    assert!(
        error.starts_with(r#""from" is not an instant ("yesterday"): "#)
            && error.ends_with(
                "write an RFC 3339 instant like 2026-03-08T00:00:00Z or 2026-03-08T01:00:00+01:00"
            ),
        "{error}"
    );
    assert_eq!(
        refused(r#"{"from": "2026-01-03T00:00:00Z", "to": "2026-01-01T00:00:00Z"}"#),
        "cannot backfill task backup: --from 2026-01-03T00:00:00+00:00 is not before --to \
         2026-01-01T00:00:00+00:00: the range [from, to) is empty"
    );
    let error = refused(r#"{"from": "2026-01-01T00:00:00Z", "till": "2026-01-03T00:00:00Z"}"#);
    assert!(
        error.starts_with("the body must be a JSON object such as {\"from\": ")
            && error.contains("unknown field `till`"),
        "{error}"
    );
    assert_eq!(
        refused(r#"{"reason": "catch up"}"#),
        "only pause takes a reason"
    );
    let range = r#"{"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"}"#;
    let (code, answer) = post(address, "/api/tasks/backup/trigger", Some(TOKEN), range);
    assert_eq!(
        (code, answer["error"].as_str().unwrap()),
        (400, "only backfill takes \"from\" and \"to\"")
    );
    let (code, answer) = post(address, backfill, None, range);
    assert_eq!(code, 401, "{answer}");
    assert!(!daemon.log().contains("HTTP API:"), "{}", daemon.log());

    // Two ticks (02:30 in Paris) in the range: requested as `zkcron backfill` requests them.
    let (code, answer) = post(address, backfill, Some(TOKEN), range);
    assert_eq!(code, 200, "{answer}");
    let id = answer["backfill"]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("backup@backfill-"), "{answer}");
    assert_eq!(answer["backfill"]["ticks"], 2, "{answer}");
    assert_eq!(
        answer["message"].as_str().unwrap(),
        format!(
            "task backup: backfill of 2 tick(s) in [2026-01-01T00:00:00Z, 2026-01-03T00:00:00Z) \
             requested, id {id}"
        )
    );
    wait_for("both backfilled ticks in the history", LIMIT, || {
        let (_, detail) = http_get(address, "/api/tasks/backup");
        let mut ticks: Vec<String> = json(&detail)["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["backfill"] == true && r["success"] == true)
            .map(|r| r["tick"].as_str().unwrap().to_string())
            .collect();
        ticks.sort();
        ticks == ["2026-01-01T01:30:00Z", "2026-01-02T01:30:00Z"]
    });
    let log = daemon.log();
    assert!(
        log.contains("HTTP API: backfill task backup for 127.0.0.1:")
            && log.contains("(range: [2026-01-01T00:00:00Z, 2026-01-03T00:00:00Z))"),
        "{log}"
    );

    // A pooled task's page shows its items per node (the one node runs every item).
    let (code, page) = http_get(address, "/tasks/shards");
    assert_eq!(code, 200);
    assert!(
        page.contains(
            "<th scope=\"row\"><a href=\"/nodes/test-node\">test-node</a></th><td>4</td>"
        ),
        "{page}"
    );
    let (_, page) = http_get(address, "/tasks/backup");
    assert!(!page.contains("Work items per node"), "{page}");
}

#[test]
fn given_an_admin_token_file_others_may_read_then_validate_and_run_refuse_it_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let token = admin_token_file(scratch.path(), TOKEN);
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = scratch.write_config(&http_config(Some(&token)));
    let expected = format!(
        "the admin_token_file {} may be read by group or others (mode 644); run `chmod 600 {}`",
        token.display(),
        token.display()
    );
    let jobs = scratch.jobs();
    let state = scratch.path().join("state");
    let validate = run_zkcron(&["validate", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&validate.stderr);
    assert_ne!(validate.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    let run = run_zkcron(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--jobs-dir",
        jobs.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_ne!(run.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");

    std::fs::write(&token, "short\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let validate = run_zkcron(&["validate", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&validate.stderr);
    assert!(
        stderr.contains(&format!(
            "the admin_token_file {} must hold one token of at least 16 characters without \
             spaces; make one with `openssl rand -hex 32 > {}`",
            token.display(),
            token.display()
        )),
        "{stderr}"
    );
}
