//! A run's page, `/runs/<fire id>?node=N` (linked from every row of a task's history): how it
//! ended, and its output as the node that ran it keeps it (or, that node gone, the last lines
//! stored with a failure), read by the page's script from `/api/runs/<fire id>/output` with a
//! token (output can hold secrets, so the page itself holds none of it) and streamed while the
//! run goes on.
//! Every value is escaped: the script writes the output as text, never as markup.

use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Response};
use maud::html;

use super::Endpoint;
use super::pages::{error_page, href, instant, layout};
use crate::executor::kept::task_of;
use crate::ops::render;

#[derive(Debug, Default, serde::Deserialize)]
pub struct RunQuery {
    /// The node that ran it (a pooled or every-node task's fire id runs on several).
    #[serde(default)]
    pub node: Option<String>,
}

pub async fn page(
    State(endpoint): State<Endpoint>,
    Path(fire_id): Path<String>,
    Query(query): Query<RunQuery>,
) -> Response {
    let task = task_of(&fire_id).to_string();
    let history = match endpoint.cache.history(&task).await {
        Ok(history) => history,
        Err(message) => return error_page(axum::http::StatusCode::SERVICE_UNAVAILABLE, &message),
    };
    let run = history
        .iter()
        .rev()
        .find(|run| run.fire_id == fire_id && query.node.as_ref().is_none_or(|n| *n == run.node));
    let node = query
        .node
        .clone()
        .or_else(|| run.map(|run| run.node.clone()))
        .unwrap_or_else(|| endpoint.cache.source.node_id().to_string());
    let mut api = format!("{}/output", href("api/runs", &fire_id));
    api.push_str(&format!("?node={}", crate::ops::logs::percent(&node)));
    let body = html! {
        h2 { "Run " code { (fire_id) } }
        p {
            "Task " a href=(href("tasks", &task)) { (task) }
            ", on node " a href=(href("nodes", &node)) { (node) }
        }
        @if let Some(run) = run {
            p class=(if run.success { "ok" } else { "bad" }) {
                (render::outcome(run.success, run.exit_code, run.signal))
                @if run.attempts > 1 { " after " (run.attempts) " attempts" }
                ", started " (instant(run.started_at)) ", took " (render::millis(run.duration_ms))
            }
        } @else {
            p.muted { "Not in the task's history: still running, or older than the history keeps." }
        }
        h3 { "Output" }
        form #output-form data-api=(api) hidden {
            label { "Token " input #token type="password" autocomplete="off" placeholder="read or admin token"; }
            " " button type="submit" { "Show the output" }
            " " button #forget-token type="button" { "Forget the token" }
        }
        p #output-state .muted { "The output is read from node " (node) " with a token ([http] read_token_file or admin_token_file)." }
        pre #output {}
    };
    Html(layout(&endpoint, &format!("run {fire_id}"), body).into_string()).into_response()
}
