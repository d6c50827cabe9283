//! The HTTP API under `/api/` (docs/operating.md, "The HTTP API"): reads of the cluster as the
//! dashboard shows it, and the operator's changes (trigger, backfill, pause, resume, drain,
//! undrain) made through the commands' own code (`ops::change`, which writes by
//! `coord::operator`'s rules). A pause's reason is checked by the rule `zkcron pause --reason`
//! applies (`coord::operator::check_reason`): a reason it refuses is a 400 here.
//!
//! A change needs `[http] admin_token_file`: without it every POST is refused (403) and changes
//! nothing; with it, a POST must carry `Authorization: Bearer <token>` (401 otherwise; compared
//! in constant time) and `Content-Type: application/json`. No cookie grants anything and no
//! CORS header is sent, so a page of another site cannot make a change. Errors are JSON
//! `{"error": "..."}`; every accepted change is logged with what, where and the client.

use std::net::SocketAddr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use subtle::ConstantTimeEq;

use super::Endpoint;
use super::cache::View;
use crate::coord::operator::check_reason;
use crate::coord::records::{HistoryEntry, MarkRecord, TaskSetEntry};
use crate::ops::change::Change;
use crate::ops::explain::{self, Explain};
use crate::ops::model::{self, NodeStatus, Snapshot};

/// Whether this endpoint accepts changes.
#[derive(Clone)]
pub enum Admin {
    /// No `[http] admin_token_file`: every change is refused.
    Off,
    /// Changes need this token.
    Token(String),
}

/// How many next ticks a task's page and API show.
pub const NEXT_TICKS: usize = 10;

/// An error answer: `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    ApiError::new(status, message).into_response()
}

/// Why a request fails: its status and message (JSON in the API, a page in the dashboard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Error {
            error: String,
        }
        (
            self.status,
            Json(Error {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// The snapshot, or the 503 that says why it cannot be read.
pub async fn snapshot(endpoint: &Endpoint) -> Result<std::sync::Arc<Snapshot>, ApiError> {
    endpoint
        .cache
        .snapshot()
        .await
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why))
}

/// The cached view, or the 503 that says why it cannot be read.
pub async fn view(endpoint: &Endpoint) -> Result<std::sync::Arc<View>, ApiError> {
    endpoint
        .cache
        .view()
        .await
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why))
}

/// The header that says why a view may miss changes (the ZooKeeper connection was lost):
/// absent while it shows every change.
pub const BEHIND_HEADER: &str = "x-zkcron-behind";

/// `GET /api/status`: `zkcron status --json` of the cached view, serialized once per view.
pub async fn status(State(endpoint): State<Endpoint>) -> Response {
    match view(&endpoint).await {
        Ok(view) => {
            let mut response = (
                [(header::CONTENT_TYPE, "application/json")],
                view.status_json(),
            )
                .into_response();
            if let Some(behind) = view
                .behind
                .as_deref()
                .and_then(|b| header::HeaderValue::from_str(b).ok())
            {
                response.headers_mut().insert(BEHIND_HEADER, behind);
            }
            response
        }
        Err(error) => error.into_response(),
    }
}

/// How this node's jobs dir defines a task (what the cluster's task set does not hold).
#[derive(Debug, Clone, Serialize)]
pub struct Loaded {
    /// The node whose jobs dir this is (the one serving the page).
    pub node: String,
    pub file: String,
    pub description: Option<String>,
    pub command: String,
    pub enabled: bool,
}

/// `GET /api/tasks/<task>`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskDetail {
    pub task: String,
    /// The definition the leader (else an eligible node) published.
    pub definition: Option<TaskSetEntry>,
    /// The task as the serving node loaded it, if it defines it.
    pub loaded: Option<Loaded>,
    pub explain: Explain,
    /// The next ticks (UTC), after the fire record when it is ahead.
    pub next_ticks: Vec<DateTime<Utc>>,
    pub paused: Option<MarkRecord>,
    /// Newest first.
    pub history: Vec<HistoryEntry>,
    /// The tick ledger, oldest first (`GET /api/tasks/<task>/ticks`).
    pub ticks: Vec<crate::plan::ledger::Line>,
}

/// Everything a task's page shows; 404 when no live node defines it.
pub async fn task_detail(endpoint: &Endpoint, task: &str) -> Result<TaskDetail, ApiError> {
    let snapshot = snapshot(endpoint).await?;
    let now = endpoint.now();
    let Some(mut explain) = explain::explain(&snapshot, task, now) else {
        let unknown = crate::ops::unknown_task(&snapshot, task);
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("{unknown:#}")));
    };
    if let Some(shares) = endpoint.cache.source.work_items(task) {
        explain.status.work_items = shares;
    }
    let definition = model::task_entry(&snapshot, task);
    let next_ticks = next_ticks(&snapshot, task, now);
    let mut history = endpoint
        .cache
        .history(task)
        .await
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why))?
        .as_ref()
        .clone();
    let ticks = crate::ops::ticks::of_cluster(&snapshot, task, &history, now);
    history.reverse();
    // A failure's stored output can hold secrets: it is read with a token
    // (`/api/runs/<fire id>/output`), never with the rest of the history.
    for run in &mut history {
        run.output_tail = None;
    }
    let loaded = endpoint.cache.source.loaded(task).map(|spec| Loaded {
        node: endpoint.cache.source.node_id().to_string(),
        file: spec.path.display().to_string(),
        description: spec.extras.description.clone(),
        command: match &spec.command {
            crate::task::CommandLine::Argv(argv) => format!("{argv:?}"),
            crate::task::CommandLine::Shell(line) => line.clone(),
        },
        enabled: spec.enabled,
    });
    Ok(TaskDetail {
        task: task.to_string(),
        definition,
        loaded,
        paused: snapshot.paused.get(task).cloned(),
        explain,
        next_ticks,
        history,
        ticks,
    })
}

/// `GET /api/tasks/<task>/ticks`: the task's tick ledger (`zkcron history --ticks --json`).
pub async fn ticks(State(endpoint): State<Endpoint>, Path(task): Path<String>) -> Response {
    match task_detail(&endpoint, &task).await {
        Ok(detail) => Json(detail.ticks).into_response(),
        Err(error) => error.into_response(),
    }
}

fn next_ticks(snapshot: &Snapshot, task: &str, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let Some(schedule) = model::task_schedule(snapshot, task) else {
        return Vec::new();
    };
    let record = snapshot.fire_records.get(task).and_then(|r| r.tick);
    let after = record.map_or(now, |r| r.max(now));
    schedule.ticks_after(after).take(NEXT_TICKS).collect()
}

/// `GET /api/tasks/<task>`.
pub async fn task(State(endpoint): State<Endpoint>, Path(task): Path<String>) -> Response {
    match task_detail(&endpoint, &task).await {
        Ok(detail) => Json(detail).into_response(),
        Err(error) => error.into_response(),
    }
}

/// A run in flight: claimed to run, with no result of its tick yet.
#[derive(Debug, Clone, Serialize)]
pub struct InFlight {
    pub task: String,
    pub tick: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
}

/// `GET /api/nodes/<node>`.
#[derive(Debug, Clone, Serialize)]
pub struct NodeDetail {
    pub node: NodeStatus,
    /// The tasks whose lease it holds.
    pub leads: Vec<String>,
    pub in_flight: Vec<InFlight>,
}

/// Everything a node's page shows; 404 when it is not a live member.
pub async fn node_detail(endpoint: &Endpoint, node: &str) -> Result<NodeDetail, ApiError> {
    let view = view(endpoint).await?;
    let snapshot = &view.snapshot;
    let Some(found) = view.status.nodes.iter().find(|n| n.id == node).cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown node {node}: it is not a live member"),
        ));
    };
    let leads = snapshot
        .leases
        .iter()
        .filter(|(_, lease)| lease.node == node)
        .map(|(task, _)| task.clone())
        .collect();
    let in_flight = snapshot
        .fire_records
        .iter()
        .filter(|(_, r)| r.run && r.node == node)
        .filter_map(|(task, r)| {
            let tick = r.tick?;
            let ended = snapshot
                .results
                .get(task)
                .is_some_and(|res| res.tick >= tick);
            (!ended).then(|| InFlight {
                task: task.clone(),
                tick,
                claimed_at: r.claimed_at,
            })
        })
        .collect();
    Ok(NodeDetail {
        node: found,
        leads,
        in_flight,
    })
}

/// `GET /api/nodes/<node>`.
pub async fn node(State(endpoint): State<Endpoint>, Path(node): Path<String>) -> Response {
    match node_detail(&endpoint, &node).await {
        Ok(detail) => Json(detail).into_response(),
        Err(error) => error.into_response(),
    }
}

/// What a POST asks, once authorized: `{"reason": ...}` for pause, `{"from": ..., "to": ...}`
/// for backfill, nothing else.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
}

/// How a backfill's body looks, for the errors that show it.
const BACKFILL_BODY: &str =
    "{\"from\": \"2026-03-08T00:00:00Z\", \"to\": \"2026-03-09T00:00:00Z\"}";

impl Body {
    /// Reads `bytes` (nothing: an empty body) for `change`.
    fn read(bytes: &[u8], change: &Change) -> Result<Body, ApiError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body::default());
        }
        serde_json::from_slice(bytes).map_err(|e| {
            let example = match change {
                Change::Backfill { .. } => BACKFILL_BODY,
                _ => "{\"reason\": \"...\"}",
            };
            bad_request(format!(
                "the body must be a JSON object such as {example}: {e}"
            ))
        })
    }

    /// Puts what the body says into `change`, or says why it cannot.
    fn fill(&self, change: &mut Change) -> Result<(), ApiError> {
        if self.reason.is_some() && !matches!(change, Change::Pause { .. }) {
            return Err(bad_request("only pause takes a reason"));
        }
        let ranged = self.from.is_some() || self.to.is_some();
        if ranged && !matches!(change, Change::Backfill { .. }) {
            return Err(bad_request("only backfill takes \"from\" and \"to\""));
        }
        match change {
            Change::Pause { reason, .. } => {
                // The rule `zkcron pause --reason` applies: one line, at most 500 bytes.
                *reason = (self.reason.as_deref())
                    .map(check_reason)
                    .transpose()
                    .map_err(|e| bad_request(format!("\"reason\": {e}")))?;
            }
            Change::Backfill { from, to, .. } => {
                *from = instant("from", self.from.as_deref())?;
                *to = instant("to", self.to.as_deref())?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The body's `key`, an RFC 3339 instant, as `zkcron backfill --from/--to` reads it.
fn instant(key: &str, value: Option<&str>) -> Result<DateTime<Utc>, ApiError> {
    let Some(value) = value else {
        return Err(bad_request(format!(
            "a backfill needs \"{key}\": send a body such as {BACKFILL_BODY}"
        )));
    };
    crate::ops::args::parse_rfc3339(value)
        .map_err(|e| bad_request(format!("\"{key}\" is not an instant ({value:?}): {e}")))
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// Refuses a POST unless changes are on, it carries the token and it is JSON.
fn authorize(endpoint: &Endpoint, headers: &HeaderMap) -> Result<(), ApiError> {
    let Admin::Token(token) = &endpoint.admin else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "changes through the HTTP API are off on this node: set [http] admin_token_file in \
             zkcron.toml to a file holding a token (mode 0600, e.g. made by `openssl rand -hex \
             32`), restart zkcron, and send the token as `Authorization: Bearer <token>`",
        ));
    };
    let Some(given) = bearer(headers) else {
        return Err(unauthorized(
            "this change needs the admin token: send `Authorization: Bearer <token>` (the token \
             in [http] admin_token_file)",
        ));
    };
    if !same_token(given, token) {
        return Err(unauthorized(
            "wrong admin token: send the one in [http] admin_token_file",
        ));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a change must be sent with `Content-Type: application/json`",
        ));
    }
    Ok(())
}

/// The token of `Authorization: Bearer <token>`, trimmed; `None` without one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Whether `given` is `token`, compared in constant time.
pub fn same_token(given: &str, token: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, message)
}

/// `POST /api/tasks/<task>/<action>`: trigger, backfill, pause, resume.
pub async fn task_action(
    State(endpoint): State<Endpoint>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path((task, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let change = match action.as_str() {
        "trigger" => Change::Trigger { task },
        // The range is read from the body once the request is authorized.
        "backfill" => Change::Backfill {
            task,
            from: DateTime::<Utc>::MIN_UTC,
            to: DateTime::<Utc>::MIN_UTC,
        },
        "pause" => Change::Pause { task, reason: None },
        "resume" => Change::Resume { task },
        _ => return unknown_action(&action, "trigger, backfill, pause or resume"),
    };
    act(&endpoint, client, &headers, &body, change).await
}

/// `POST /api/nodes/<node>/<action>`: drain, undrain.
pub async fn node_action(
    State(endpoint): State<Endpoint>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path((node, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let change = match action.as_str() {
        "drain" => Change::Drain { node },
        "undrain" => Change::Undrain { node },
        _ => return unknown_action(&action, "drain or undrain"),
    };
    act(&endpoint, client, &headers, &body, change).await
}

fn unknown_action(action: &str, known: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("unknown action {action:?}: POST {known}"),
    )
}

/// What an accepted change answers.
#[derive(Debug, Serialize)]
struct Accepted {
    ok: bool,
    /// What `zkcron <action>` would have printed.
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fire_id: Option<String>,
    /// A backfill's request id and tick count.
    #[serde(skip_serializing_if = "Option::is_none")]
    backfill: Option<crate::ops::change::BackfillRequested>,
}

/// Why `change` with `body` is refused before it is tried, if it is: not authorized, a body
/// that is no JSON object or does not fit the change, a node change on the local backend, an
/// unknown task, a range to backfill that is empty or too long. Else `change` is completed
/// from the body (a pause's reason, a backfill's range).
async fn refusal(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    body: &[u8],
    change: &mut Change,
) -> Result<(), ApiError> {
    authorize(endpoint, headers)?;
    Body::read(body, change)?.fill(change)?;
    match change {
        Change::Drain { .. } | Change::Undrain { .. }
            if endpoint.backend == super::Backend::Local =>
        {
            Err(bad_request(format!(
                "`zkcron {}` {}",
                change.name(),
                crate::ops::CLUSTER_ONLY
            )))
        }
        Change::Drain { .. } | Change::Undrain { .. } => Ok(()),
        Change::Trigger { task }
        | Change::Pause { task, .. }
        | Change::Resume { task }
        | Change::Backfill { task, .. } => {
            let snapshot = snapshot(endpoint).await?;
            if !crate::ops::defined(&snapshot, task) {
                let unknown = crate::ops::unknown_task(&snapshot, task);
                return Err(ApiError::new(StatusCode::NOT_FOUND, format!("{unknown:#}")));
            }
            if let Change::Backfill { task, from, to } = change
                && let Some(schedule) = model::schedule_of(&snapshot, task)
            {
                // Counted again where it is requested; here so that a bad range is a 400.
                crate::ops::backfill::new_request(task, &schedule, *from, *to, "", endpoint.now())
                    .map_err(|e| bad_request(format!("{e:#}")))?;
            }
            Ok(())
        }
    }
}

/// What to log of `change`: its name, what it is on, and its details (a reason, a range).
fn described(change: &Change) -> (&'static str, String, String) {
    let (target, detail) = match change {
        Change::Trigger { task } | Change::Resume { task } => (format!("task {task}"), None),
        Change::Pause { task, reason } => (
            format!("task {task}"),
            reason.as_ref().map(|r| format!("reason: {r}")),
        ),
        Change::Backfill { task, from, to } => (
            format!("task {task}"),
            Some(format!(
                "range: [{}, {})",
                crate::ops::render::instant(*from),
                crate::ops::render::instant(*to)
            )),
        ),
        Change::Drain { node } | Change::Undrain { node } => (format!("node {node}"), None),
    };
    let detail = detail.map(|d| format!(" ({d})")).unwrap_or_default();
    (change.name(), target, detail)
}

/// Makes `change` unless it is refused, and logs it.
async fn act(
    endpoint: &Endpoint,
    client: SocketAddr,
    headers: &HeaderMap,
    body: &[u8],
    mut change: Change,
) -> Response {
    match refusal(endpoint, headers, body, &mut change).await {
        Ok(()) => {}
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => {
            let mut response = refused.into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        Err(refused) => return refused.into_response(),
    }
    let reason = match &change {
        Change::Pause { reason, .. } => reason.clone().unwrap_or_default(),
        _ => String::new(),
    };
    let (action, target, detail) = described(&change);
    let by = format!("{} (HTTP API, client {client})", crate::ops::operator());
    match endpoint.cache.source.change(change, by).await {
        Ok(done) => {
            endpoint.cache.forget().await;
            tracing::info!(
                action,
                target = %target,
                client = %client,
                reason,
                "HTTP API: {action} {target} for {client}{detail}"
            );
            Json(Accepted {
                ok: true,
                message: done.said.join("\n"),
                note: done.note,
                fire_id: done.fire_id,
                backfill: done.backfill,
            })
            .into_response()
        }
        Err(why) => error(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}
