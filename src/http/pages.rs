//! The dashboard's pages, rendered on the server with maud (which escapes every value: nothing
//! a task file or ZooKeeper holds becomes markup): the overview at `/`, a page per node here,
//! a page per task in [`super::task_page`]. Every table is plain HTML, so the pages work with
//! JavaScript off (`?q=` filters on the server); the script only refreshes, sorts and filters
//! as one types, and sends changes.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use super::cache::View;
use super::{Backend, Endpoint, api};
use crate::ops::live::{Schedules, ShownSchedule};
use crate::ops::model::{LastRun, NodeStatus, Status, TaskStatus};
use crate::ops::render;

/// `?q=`: the filter of the overview's tables.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Filter {
    #[serde(default)]
    pub q: String,
}

/// Whether every word of `query` is in one of `fields` (case-insensitive).
pub fn matches(query: &str, fields: &[&str]) -> bool {
    let text = fields.join(" ").to_lowercase();
    query
        .to_lowercase()
        .split_whitespace()
        .all(|word| text.contains(word))
}

/// `/<prefix>/<name>` with `name` percent-encoded (names are path-safe, strangers' records
/// need not be).
pub fn href(prefix: &str, name: &str) -> String {
    format!("/{prefix}/{}", crate::ops::logs::percent(name))
}

/// An instant as the pages show it (UTC, whole seconds), sortable.
pub fn instant(t: DateTime<Utc>) -> Markup {
    html! { time datetime=(render::instant(t)) { (render::instant(t)) } }
}

/// The page around `body`.
pub fn layout(endpoint: &Endpoint, title: &str, body: Markup) -> Markup {
    let node = endpoint.cache.source.node_id();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · zkcron" }
                link rel="stylesheet" href="/assets/style.css";
                // No favicon request (it would be a 404 in every console).
                link rel="icon" href="data:,";
                script src="/assets/app.js" defer {}
            }
            body {
                header {
                    h1 { a href="/" { "zkcron" } }
                    span { "served by node " a href=(href("nodes", node)) { (node) } }
                    span.muted #refreshed { "rendered " (render::instant(endpoint.now())) }
                }
                main { (body) }
            }
        }
    }
}

/// A page saying what went wrong, with `status`.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "zkcron: " (status.as_str()) }
                link rel="stylesheet" href="/assets/style.css";
                link rel="icon" href="data:,";
            }
            body { main { h1 { (status.as_str()) } p { (message) } p { a href="/" { "The overview" } } } }
        }
    };
    (status, Html(page.into_string())).into_response()
}

/// A failed read as a page.
pub fn as_page(error: api::ApiError) -> Response {
    error_page(error.status, &error.message)
}

/// A task's state in a word, and its class: `ok`, `paused`, `failing`, `problem`, `ended`
/// (past its `active_until`), `not started yet` (before its `active_from`).
pub fn state(task: &TaskStatus) -> (&'static str, &'static str) {
    if task.paused {
        ("paused", "warn")
    } else if task.problem.is_some() || !task.drift.is_empty() {
        ("problem", "bad")
    } else if task.ended_at.is_some() {
        ("ended", "muted")
    } else if task.done.is_some() {
        ("done", "muted")
    } else if task.starts_at.is_some() {
        ("not started yet", "muted")
    } else if task.last.as_ref().is_some_and(|l| !l.success) {
        ("failing", "bad")
    } else {
        ("ok", "ok")
    }
}

/// `GET /`: problems, then nodes, then tasks, rendered from the cached view (once per view
/// without a filter).
pub async fn overview(State(endpoint): State<Endpoint>, Query(filter): Query<Filter>) -> Response {
    let view = match api::view(&endpoint).await {
        Ok(view) => view,
        Err(error) => return as_page(error),
    };
    let render = || overview_page(&endpoint, &view, &filter.q).into_string();
    let page = if filter.q.is_empty() {
        view.overview(render)
    } else {
        render().into()
    };
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

fn overview_page(endpoint: &Endpoint, view: &View, q: &str) -> Markup {
    let status = &view.status;
    let title = match &status.cluster {
        Some(cluster) => format!("cluster {cluster}"),
        None => "this host (local backend)".to_string(),
    };
    let body = html! {
        h1 { "Overview of " (title) }
        form.filter method="get" action="/" role="search" {
            label for="filter" { "Filter by name, node or state" }
            input #filter type="search" name="q" value=(q) autocomplete="off";
            button type="submit" { "Filter" }
        }
        div #live {
            @if let Some(behind) = &view.behind { p.warn #behind role="status" { (behind) } }
            (problems(status))
            (nodes_table(&status.nodes, q))
            (tasks_table(&status.tasks, &view.schedules, q))
        }
    };
    layout(endpoint, "Overview", body)
}

/// The tasks that need someone: no node may run them, drift, paused, failing, held records.
fn problems(status: &Status) -> Markup {
    let troubled: Vec<&TaskStatus> = status
        .tasks
        .iter()
        .filter(|t| matches!(state(t).0, "paused" | "problem" | "failing"))
        .collect();
    html! {
        section aria-labelledby="problems" {
            h2 #problems { "Problems (" (troubled.len()) ")" }
            @if troubled.is_empty() {
                p.ok { "None: every task has a leader and its last run succeeded." }
            } @else {
                ul.problems {
                    @for task in troubled {
                        li {
                            a href=(href("tasks", &task.name)) { (task.name) } ": "
                            span class=(state(task).1) { (state(task).0) }
                            @if let Some(problem) = &task.problem { " — " (problem) }
                            @if !task.drift.is_empty() { " — definitions differ: " (render::drift(&task.drift)) }
                            @if let Some(last) = task.last.as_ref().filter(|l| !l.success) {
                                " — last run " (last_outcome(last)) " on " (last.node)
                            }
                        }
                    }
                }
            }
        }
    }
}

fn last_outcome(last: &LastRun) -> String {
    render::outcome(last.success, last.exit_code, last.signal)
}

fn nodes_table(nodes: &[NodeStatus], q: &str) -> Markup {
    html! {
        section aria-labelledby="nodes" {
            h2 #nodes { "Nodes (" (nodes.len()) ")" }
            div.table-wrap {
                table #nodes-table data-filterable {
                    thead { tr {
                        th scope="col" { "Node" } th scope="col" { "Release" }
                        th scope="col" { "Labels" } th scope="col" { "Drained" }
                        th scope="col" { "Tasks led" } th scope="col" { "Session age" }
                    } }
                    tbody {
                        @for node in nodes.iter().filter(|n| matches(q, &[&n.id, if n.drained { "drained" } else { "" }])) {
                            tr {
                                th scope="row" { a href=(href("nodes", &node.id)) { (node.id) } }
                                td { (node.release) }
                                td { (labels(&node.labels)) }
                                td class=(if node.drained { "warn" } else { "" }) { (if node.drained { "drained" } else { "no" }) }
                                td data-sort=(format!("{:09}", node.tasks_led)) { (node.tasks_led) }
                                td data-sort=(format!("{:012}", node.session_age_s)) { (render::seconds(node.session_age_s)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Labels as `key=value, ...`.
pub fn labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The next tick in the task's zone, and in UTC.
/// Every expression of a task's schedule, each in words where it has them, then its zone; and
/// the tasks whose successes run it ("after extract").
pub(super) fn schedule_cell(schedule: &ShownSchedule) -> Markup {
    html! {
        @for (i, expression) in schedule.expressions.iter().enumerate() {
            @if i > 0 { br; }
            @if let Some(words) = super::words::describe(expression) { (words) br; }
            small { code { (expression) } " " (schedule.zone) }
        }
        @if !schedule.after.is_empty() {
            @if !schedule.expressions.is_empty() { br; }
            "after "
            @for (i, parent) in schedule.after.iter().enumerate() {
                @if i > 0 { ", " }
                a href=(href("tasks", parent)) { (parent) }
            }
        }
    }
}

fn next_cell(next: Option<DateTime<Utc>>, zone: Option<&str>) -> Markup {
    let Some(next) = next else {
        return html! { td data-sort="~" { span.muted { "none" } } };
    };
    let local = zone
        .and_then(|z| crate::schedule::parse_timezone(z).ok())
        .filter(|tz| *tz != chrono_tz::UTC)
        .map(|tz| {
            next.with_timezone(&tz)
                .format("%Y-%m-%d %H:%M:%S %Z")
                .to_string()
        });
    html! {
        td data-sort=(render::instant(next)) {
            @if let Some(local) = local { (local) br; small { (instant(next)) } }
            @else { (instant(next)) }
        }
    }
}

fn tasks_table(tasks: &[TaskStatus], schedules: &Schedules, q: &str) -> Markup {
    let shown: Vec<&TaskStatus> = tasks
        .iter()
        .filter(|t| {
            let leader = t.leader.as_deref().unwrap_or("no leader");
            let last_node = t.last.as_ref().map_or("", |l| l.node.as_str());
            matches(q, &[&t.name, leader, last_node, state(t).0])
        })
        .collect();
    html! {
        section aria-labelledby="tasks" {
            h2 #tasks { "Tasks (" (shown.len()) " of " (tasks.len()) ")" }
            div.table-wrap {
                table #tasks-table data-filterable {
                    thead { tr {
                        th scope="col" { "Task" } th scope="col" { "State" } th scope="col" { "Leader" }
                        th scope="col" { "Schedule" } th scope="col" { "Next tick" }
                        th scope="col" { "Last run" }
                    } }
                    tbody {
                        @for task in shown {
                            (task_row(task, schedules.get(&task.name)))
                        }
                    }
                }
            }
        }
    }
}

fn task_row(task: &TaskStatus, schedule: Option<&ShownSchedule>) -> Markup {
    let (word, class) = state(task);
    html! {
        tr {
            th scope="row" { a href=(href("tasks", &task.name)) { (task.name) } }
            td class=(class) { (word) }
            td {
                @match &task.leader {
                    Some(leader) => a href=(href("nodes", leader)) { (leader) },
                    None if !task.every_node.is_empty() => {
                        "every node: "
                        @for (i, node) in task.every_node.iter().enumerate() {
                            @if i > 0 { ", " }
                            a href=(href("nodes", node)) { (node) }
                        }
                    },
                    None => span.bad { "no leader" },
                }
            }
            td { @if let Some(schedule) = schedule { (schedule_cell(schedule)) } }
            (next_cell(task.next, schedule.map(|s| s.zone.as_str())))
            td data-sort=(task.last.as_ref().map(|l| render::instant(l.finished_at)).unwrap_or_default()) {
                @if let Some(last) = &task.last {
                    span class=(if last.success { "ok" } else { "bad" }) { (last_outcome(last)) }
                    " on " a href=(href("nodes", &last.node)) { (last.node) }
                    ", " (render::millis(last.duration_ms)) br;
                    small { "ended " (instant(last.finished_at)) }
                } @else { span.muted { "never ran" } }
            }
        }
    }
}

/// An input of the actions' form besides the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The pause's reason (`"reason"` in the body).
    PauseReason,
    /// A backfill's range (`"from"` and `"to"`, RFC 3339 instants).
    BackfillRange,
}

/// The change buttons, or why there are none. They need the script (it sends the token),
/// so they stay hidden until it shows them.
pub fn actions(
    endpoint: &Endpoint,
    api_path: &str,
    buttons: &[(&str, &str)],
    fields: &[Field],
) -> Markup {
    html! {
        section aria-labelledby="actions" {
            h2 #actions { "Actions" }
            @if let api::Admin::Off = endpoint.admin {
                p.muted {
                    "Changes from this page are off on this node: set " code { "[http] admin_token_file" }
                    " (see docs/operating.md) to enable them."
                }
            } @else {
                noscript { p { "The actions need JavaScript (they send the admin token); use the API or the zkcron commands instead." } }
                form.actions hidden data-api=(api_path) {
                    label for="token" { "Admin token" }
                    input #token type="password" autocomplete="off";
                    @for field in fields {
                        @match field {
                            Field::PauseReason => {
                                label for="reason" { "Pause reason" }
                                input #reason name="reason" type="text";
                            }
                            Field::BackfillRange => {
                                label for="from" { "Backfill from" }
                                input #from name="from" type="text" placeholder="2026-03-08T00:00:00Z" autocomplete="off";
                                label for="to" { "to (excluded)" }
                                input #to name="to" type="text" placeholder="2026-03-09T00:00:00Z" autocomplete="off";
                            }
                        }
                    }
                    @for (value, text) in buttons {
                        button type="submit" value=(value) { (text) }
                    }
                    button #forget-token type="button" { "Forget the token" }
                }
                p #action-result role="status" aria-live="polite" {}
            }
        }
    }
}

/// `GET /nodes/<node>`.
pub async fn node(State(endpoint): State<Endpoint>, Path(node): Path<String>) -> Response {
    let detail = match api::node_detail(&endpoint, &node).await {
        Ok(detail) => detail,
        Err(error) => return as_page(error),
    };
    let n = &detail.node;
    let body = html! {
        h1 { "Node " (n.id) }
        div #live {
            dl {
                dt { "Release" } dd { (n.release) }
                dt { "Labels" } dd { (labels(&n.labels)) }
                dt { "Drained" } dd { (if n.drained { "yes" } else { "no" }) }
                dt { "Session age" } dd { (render::seconds(n.session_age_s)) }
            }
            h2 { "Leads (" (detail.leads.len()) ")" }
            @if detail.leads.is_empty() { p.muted { "No task." } } @else {
                ul { @for task in &detail.leads { li { a href=(href("tasks", task)) { (task) } } } }
            }
            h2 { "Runs in flight (" (detail.in_flight.len()) ")" }
            div.table-wrap { table #inflight-table {
                thead { tr { th scope="col" { "Task" } th scope="col" { "Tick" } th scope="col" { "Claimed" } } }
                tbody { @for run in &detail.in_flight { tr {
                    th scope="row" { a href=(href("tasks", &run.task)) { (run.task) } }
                    td { (instant(run.tick)) }
                    td { @if let Some(at) = run.claimed_at { (instant(at)) } }
                } } }
            } }
        }
        @if endpoint.backend != Backend::Local {
            (actions(&endpoint, &href("api/nodes", &n.id), &[("drain", "Drain"), ("undrain", "Undrain")], &[]))
        }
    };
    Html(layout(&endpoint, &format!("node {node}"), body).into_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stranger's records in ZooKeeper are text on the page, and their names stay one path
    /// segment in links.
    #[test]
    fn markup_read_from_zookeeper_is_shown_as_text() {
        let task = TaskStatus {
            name: "nightly".into(),
            leader: Some("<img src=x onerror=alert(1)>".into()),
            paused: false,
            next: None,
            last: None,
            drift: Vec::new(),
            problem: Some("<script>alert(2)</script>".into()),
            ..TaskStatus::default()
        };
        let status = Status {
            backend: "zookeeper".into(),
            cluster: Some("default".into()),
            nodes: Vec::new(),
            tasks: vec![task.clone()],
        };
        let page = tasks_table(&status.tasks, &BTreeMap::new(), "").into_string()
            + &problems(&status).into_string();
        assert!(
            !page.contains("<img") && !page.contains("<script"),
            "{page}"
        );
        assert!(
            page.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{page}"
        );
        assert!(
            page.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
            "{page}"
        );
        assert!(
            page.contains("href=\"/nodes/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E\""),
            "{page}"
        );
    }

    /// Regression: the Schedule column was empty for a list of schedules and for a task that
    /// only runs after another.
    #[test]
    fn the_schedule_column_shows_every_expression_of_a_list_and_the_parents_a_task_runs_after() {
        let tasks = ["listed", "child"].map(|name| TaskStatus {
            name: name.into(),
            ..TaskStatus::default()
        });
        let schedules = Schedules::from([
            (
                "listed".to_string(),
                ShownSchedule {
                    expressions: vec!["0 6 * * *".into(), "@every 90m".into()],
                    zone: "Europe/Berlin".into(),
                    after: Vec::new(),
                },
            ),
            (
                "child".to_string(),
                ShownSchedule {
                    expressions: Vec::new(),
                    zone: "UTC".into(),
                    after: vec!["extract".into(), "<b>x</b>".into()],
                },
            ),
        ]);
        let page = tasks_table(&tasks, &schedules, "").into_string();
        let listed = &page[page.find("/tasks/listed").unwrap()..page.find("/tasks/child").unwrap()];
        assert!(
            listed.contains("<code>0 6 * * *</code> Europe/Berlin")
                && listed.contains("<code>@every 90m</code> Europe/Berlin"),
            "{listed}"
        );
        let child = &page[page.find("/tasks/child").unwrap()..];
        assert!(
            child.contains("after <a href=\"/tasks/extract\">extract</a>, "),
            "{child}"
        );
        assert!(
            child.contains("&lt;b&gt;x&lt;/b&gt;") && !child.contains("<b>"),
            "{child}"
        );
    }

    #[test]
    fn an_every_node_task_names_the_nodes_that_run_it_instead_of_no_leader() {
        let task = TaskStatus {
            name: "cleanup".into(),
            every_node: vec!["a".into(), "b".into()],
            ..TaskStatus::default()
        };
        let page = task_row(&task, None).into_string();
        assert!(!page.contains("no leader"), "{page}");
        assert!(
            page.contains(r#"every node: <a href="/nodes/a">a</a>, <a href="/nodes/b">b</a>"#),
            "{page}"
        );
    }

    #[test]
    fn the_filter_keeps_rows_with_every_word() {
        assert!(matches("", &["backup"]));
        assert!(matches("BACK node-a", &["backup", "node-a", "ok"]));
        assert!(!matches("backup failing", &["backup", "node-a", "ok"]));
    }
}
