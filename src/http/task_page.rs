//! A task's page (`/tasks/<task>`): its definition, the ranked candidates and why (what
//! `zkcron explain` says), its pool's work items per node, its active backfills, its next
//! ticks, its history with a chart of duration and lateness, and the changes (trigger, pause
//! with a reason, resume, backfill a range).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};

use super::Endpoint;
use super::api::{self, TaskDetail};
use super::chart;
use super::pages::{Field, actions, as_page, href, instant, labels, layout, schedule_cell, state};
use crate::coord::records::RunTrigger;
use crate::ops::links::ParentLink;
use crate::ops::live::shown_schedule;
use crate::ops::model::BackfillProgress;
use crate::ops::render;

/// `GET /tasks/<task>`.
pub async fn page(State(endpoint): State<Endpoint>, Path(task): Path<String>) -> Response {
    match api::task_detail(&endpoint, &task).await {
        Ok(detail) => {
            let body = body(&endpoint, &detail);
            Html(layout(&endpoint, &format!("task {task}"), body).into_string()).into_response()
        }
        Err(error) => as_page(error),
    }
}

/// The page's main part.
pub fn body(endpoint: &Endpoint, detail: &TaskDetail) -> Markup {
    let status = &detail.explain.status;
    let (word, class) = state(status);
    html! {
        h1 { "Task " (detail.task) }
        div #live {
            p { "State: " span class=(class) { (word) }
                @if let Some(problem) = &status.problem { " — " (problem) } }
            @if let Some(paused) = &detail.paused {
                p.warn { "Paused since " (instant(paused.at)) " by " (paused.by) "." }
            }
            (definition(detail))
            (links(&detail.explain.parents, &status.children))
            (candidates(detail))
            (pool(&status.work_items))
            (backfills(&status.backfills))
            (next_ticks(detail))
            (ticks(detail))
            section aria-labelledby="history" {
                h2 #history { "History (" (detail.history.len()) " runs)" }
                (chart::chart(&detail.history))
                (history(detail))
            }
        }
        (actions(
            endpoint,
            &href("api/tasks", &detail.task),
            &[
                ("trigger", "Trigger now"),
                ("pause", "Pause"),
                ("resume", "Resume"),
                ("backfill", "Backfill"),
            ],
            &[Field::PauseReason, Field::BackfillRange],
        ))
    }
}

fn definition(detail: &TaskDetail) -> Markup {
    html! {
        section aria-labelledby="definition" {
            h2 #definition { "Definition" }
            dl {
                @if let Some(entry) = &detail.definition {
                    @if let Some(schedule) = shown_schedule(Some(entry)) {
                        dt { "Schedule" } dd { (schedule_cell(&schedule)) }
                    }
                    dt { "Digest" } dd { code { (entry.digest) } }
                    @if let Some(req) = &entry.version_req { dt { "version_req" } dd { code { (req) } } }
                    @if !entry.require_labels.is_empty() {
                        dt { "require_labels" } dd { (labels(&entry.require_labels)) }
                    }
                    @if !entry.exclude.is_empty() {
                        dt { "Excludes" }
                        dd #exclude {
                            @for (i, calendar) in entry.exclude.iter().enumerate() {
                                @if i > 0 { ", " }
                                code { (calendar) }
                            }
                            " (calendars: no tick in their days and periods)"
                        }
                    }
                }
                @if let Some((runs, max)) = detail.explain.status.runs {
                    dt { "max_runs" } dd #runs { (runs) " of " (max) " scheduled runs" }
                }
                @if let Some(done) = &detail.explain.status.done {
                    dt { "Done" } dd #done { (done) ": it fires no more" }
                }
                @if let Some(loaded) = &detail.loaded {
                    dt { "Description" }
                    dd { (loaded.description.as_deref().unwrap_or("none")) }
                    dt { "Command" } dd { code { (loaded.command) } }
                    dt { "File" } dd { code { (loaded.file) } " on " (loaded.node) }
                    dt { "Enabled" } dd { (if loaded.enabled { "yes" } else { "no" }) }
                } @else {
                    dt { "Description, command" }
                    dd.muted { "this node does not define the task: see a node that does" }
                }
            }
        }
    }
}

/// The task's `after` links: its parents, each with why it is not firing (the task's chained
/// runs wait on it), and its children, each a link to its page; nothing without links.
fn links(parents: &[ParentLink], children: &[String]) -> Markup {
    html! {
        @if !parents.is_empty() || !children.is_empty() {
            section aria-labelledby="links" {
                h2 #links { "Chained with" }
                dl {
                    @if !parents.is_empty() {
                        dt { "Runs after each success of" }
                        dd { ul { @for parent in parents { li.parent {
                            a href=(href("tasks", &parent.task)) { (parent.task) }
                            @if let Some(problem) = &parent.problem {
                                " — " span.warn { "not firing: " (problem) "; this task's chained runs wait on it" }
                            }
                        } } } }
                    }
                    @if !children.is_empty() {
                        dt { "Each success runs" }
                        dd { ul { @for child in children { li.child {
                            a href=(href("tasks", child)) { (child) }
                        } } } }
                    }
                }
            }
        }
    }
}

fn candidates(detail: &TaskDetail) -> Markup {
    let explain = &detail.explain;
    html! {
        section aria-labelledby="candidates" {
            h2 #candidates { "Who may lead it" }
            p {
                @match &explain.lease {
                    Some(lease) => {
                        "Lease held by " a href=(href("nodes", &lease.node)) { (lease.node) }
                        " for " (render::seconds(lease.held_s))
                        (if lease.designated { " (the designated leader)." } else { " (covering for the designated leader)." })
                    }
                    None => span.bad { "No node holds the lease." },
                }
            }
            div.table-wrap { table #candidates-table {
                thead { tr {
                    th scope="col" { "Rank" } th scope="col" { "Node" } th scope="col" { "Release" }
                    th scope="col" { "Why" } th scope="col" { "Score" }
                } }
                tbody { @for c in &explain.candidates { tr {
                    td { @if let Some(rank) = c.rank { (rank) } @else { "–" } }
                    th scope="row" { a href=(href("nodes", &c.node)) { (c.node) } }
                    td { (c.release) }
                    td class=(if c.eligible { "ok" } else { "warn" }) { (c.reason) }
                    td { code { (c.score) } }
                } } }
            } }
            @if !explain.not_defining.is_empty() {
                p.muted { "Live nodes that do not define it: " (explain.not_defining.join(", ")) }
            }
        }
    }
}

/// A pooled task's items per node that runs them; nothing for a task without a pool.
pub fn pool(work_items: &BTreeMap<String, usize>) -> Markup {
    html! {
        @if !work_items.is_empty() {
            section aria-labelledby="pool" {
                h2 #pool { "Work items per node" }
                div.table-wrap { table #pool-table {
                    thead { tr { th scope="col" { "Node" } th scope="col" { "Items" } } }
                    tbody { @for (node, items) in work_items { tr {
                        th scope="row" { a href=(href("nodes", node)) { (node) } }
                        td { (items) }
                    } } }
                } }
            }
        }
    }
}

/// The task's active backfills (`zkcron backfill`, or the form below): done of total.
pub fn backfills(active: &[BackfillProgress]) -> Markup {
    html! {
        section aria-labelledby="backfills" {
            h2 #backfills { "Backfills (" (active.len()) " active)" }
            @if active.is_empty() { p.muted { "No backfill is running." } } @else {
                div.table-wrap { table #backfills-table {
                    thead { tr {
                        th scope="col" { "Request" } th scope="col" { "Done" }
                        th scope="col" { "Failed" } th scope="col" { "Running tick" }
                    } }
                    tbody { @for b in active { tr {
                        th scope="row" { code { (b.id) } }
                        td { (b.done) " of " (b.total) }
                        td class=(if b.failed > 0 { "bad" } else { "" }) { (b.failed) }
                        td { @if let Some(tick) = b.running { (instant(tick)) } @else { span.muted { "none" } } }
                    } } }
                } }
            }
        }
    }
}

fn next_ticks(detail: &TaskDetail) -> Markup {
    let zone = detail
        .definition
        .as_ref()
        .and_then(|d| d.timezone.as_deref())
        .and_then(|z| crate::schedule::parse_timezone(z).ok())
        .unwrap_or(chrono_tz::UTC);
    html! {
        section aria-labelledby="next" {
            h2 #next { "Next ticks" }
            @if detail.next_ticks.is_empty() { p.muted { "None known." } } @else {
                div.table-wrap { table #next-table {
                    thead { tr { th scope="col" { "In " (zone.name()) } th scope="col" { "UTC" } } }
                    tbody { @for tick in &detail.next_ticks { tr {
                        td { (tick.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z")) }
                        td { (instant(*tick)) }
                    } } }
                } }
            }
        }
    }
}

/// The page of `run`, on the node that ran it.
fn run_href(run: &crate::coord::records::HistoryEntry) -> String {
    format!(
        "{}?node={}",
        href("runs", &run.fire_id),
        crate::ops::logs::percent(&run.node)
    )
}

/// How many of the newest ledger entries the strip shows.
const STRIP_ENTRIES: usize = 60;

/// The strip of the newest ticks, oldest first: a cell per entry, coloured by outcome, its
/// reason (or fire id) and range in its title and in the list beside it.
fn ticks(detail: &TaskDetail) -> Markup {
    let shown = &detail.ticks[detail.ticks.len().saturating_sub(STRIP_ENTRIES)..];
    html! {
        section aria-labelledby="ticks" {
            h2 #ticks { "Ticks" }
            @if shown.is_empty() { p.muted { "No recorded ticks yet." } } @else {
                div.strip #tick-strip role="list" {
                    @for line in shown {
                        @let what = match (&line.fire_id, line.reason) {
                            (Some(fire_id), _) => fire_id.clone(),
                            (None, Some(reason)) => format!("{}: {}", reason.code(), reason.message()),
                            (None, None) => String::new(),
                        };
                        @let title = format!("{} {} tick(s) {} to {}: {}", line.outcome.code(), line.count, render::instant(line.from), render::instant(line.to), what);
                        span role="listitem" class=(format!("tick {}", line.outcome.code())) title=(title) data-reason=[line.reason.map(|r| r.code())] {}
                    }
                }
                details { summary { "Ticks not run" }
                    ul #tick-list { @for line in shown.iter().filter(|l| l.fire_id.is_none()) {
                        li { (instant(line.from)) @if line.to != line.from { " to " (instant(line.to)) }
                            " — " (line.count) " " (line.outcome.code()) ": "
                            @if let Some(reason) = line.reason { code { (reason.code()) } " " (reason.message()) } }
                    } }
                }
            }
        }
    }
}

fn history(detail: &TaskDetail) -> Markup {
    html! {
        @if detail.history.is_empty() { p.muted { "No recorded runs yet." } } @else {
            div.table-wrap { table #history-table data-filterable {
                thead { tr {
                    th scope="col" { "Fire id" } th scope="col" { "Tick" } th scope="col" { "Node" }
                    th scope="col" { "Release" } th scope="col" { "Started" } th scope="col" { "Duration" }
                    th scope="col" { "Lateness" } th scope="col" { "Result" } th scope="col" { "Trigger" }
                } }
                tbody { @for run in &detail.history { tr {
                    th scope="row" { a href=(run_href(run)) { code { (run.fire_id) } } }
                    td { (instant(run.tick)) }
                    td { a href=(href("nodes", &run.node)) { (run.node) } }
                    td { (run.release) }
                    td { (instant(run.started_at)) }
                    td data-sort=(format!("{:012}", run.duration_ms)) { (render::millis(run.duration_ms)) }
                    td { (format!("{:.3}s", chart::lateness_s(run))) }
                    td class=(if run.success { "ok" } else { "bad" }) {
                        (render::outcome(run.success, run.exit_code, run.signal))
                        @if run.attempts > 1 { " after " (run.attempts) " attempts" }
                    }
                    td { (match run.trigger {
                        RunTrigger::Schedule => "schedule",
                        RunTrigger::Manual if run.backfill => "backfill",
                        RunTrigger::Manual => "manual",
                    }) }
                } } }
            } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pooled task's page lists its items per node, node ids escaped and linked as one
    /// path segment; a task without a pool has no such table.
    #[test]
    fn a_pooled_task_shows_its_items_per_node() {
        let shares: BTreeMap<String, usize> =
            [("node-a".to_string(), 16), ("<b>node-b</b>".to_string(), 3)].into();
        let page = pool(&shares).into_string();
        assert!(page.contains("Work items per node"), "{page}");
        assert!(
            page.contains("<th scope=\"row\"><a href=\"/nodes/node-a\">node-a</a></th><td>16</td>"),
            "{page}"
        );
        assert!(
            page.contains(
                "<a href=\"/nodes/%3Cb%3Enode-b%3C%2Fb%3E\">&lt;b&gt;node-b&lt;/b&gt;</a></th>\
                 <td>3</td>"
            ),
            "{page}"
        );
        assert!(!page.contains("<b>"), "{page}");
        assert_eq!(pool(&BTreeMap::new()).into_string(), "");
    }

    /// A task's active backfills show done of total, failures and the tick running; a
    /// request id is text.
    #[test]
    fn active_backfills_show_done_of_total() {
        let tick = chrono::DateTime::parse_from_rfc3339("2026-01-02T01:30:00Z")
            .unwrap()
            .to_utc();
        let active = [BackfillProgress {
            id: "backup@backfill-<i>1</i>".into(),
            done: 1,
            total: 3,
            failed: 1,
            running: Some(tick),
        }];
        let page = backfills(&active).into_string();
        assert!(page.contains("Backfills (1 active)"), "{page}");
        assert!(
            page.contains(
                "<th scope=\"row\"><code>backup@backfill-&lt;i&gt;1&lt;/i&gt;</code></th>\
                 <td>1 of 3</td><td class=\"bad\">1</td>"
            ),
            "{page}"
        );
        assert!(page.contains("2026-01-02T01:30:00Z"), "{page}");
        let none = backfills(&[]).into_string();
        assert!(none.contains("No backfill is running."), "{none}");
    }

    /// A task's parents and children link to their pages (one path segment each), their
    /// names and a parent's problem are text, and a parent that is not firing says so.
    #[test]
    fn chained_tasks_link_to_their_pages_as_text() {
        let parents = [
            ParentLink {
                task: "extract".into(),
                problem: None,
            },
            ParentLink {
                task: "<b>x</b>".into(),
                problem: Some("paused: <script>".into()),
            },
        ];
        let page = links(&parents, &["load".to_string()]).into_string();
        assert!(
            page.contains("<a href=\"/tasks/extract\">extract</a>"),
            "{page}"
        );
        assert!(page.contains("<a href=\"/tasks/load\">load</a>"), "{page}");
        assert!(
            page.contains("href=\"/tasks/%3Cb%3Ex%3C%2Fb%3E\">&lt;b&gt;x&lt;/b&gt;</a>"),
            "{page}"
        );
        assert!(
            page.contains("not firing: paused: &lt;script&gt;"),
            "{page}"
        );
        assert!(!page.contains("<script") && !page.contains("<b>"), "{page}");
        assert_eq!(links(&[], &[]).into_string(), "");
    }
}
