//! `GET /api/runs/<fire id>/output[?node=N][&follow=1]`: a run's output as the node that ran
//! it keeps it ([`crate::executor::kept`]), in that file's own text format, with the header
//! `X-Zkcron-Run: live | ended | incomplete`; with `follow=1` a live run's records stream as
//! they are written until it ends. Asked of another node (`node=N`, not this one), this node
//! reads it from N's endpoint (as its member record advertises it) with the same token.
//!
//! Output can hold secrets: it is served only with `Authorization: Bearer <token>`, the admin
//! token or `[http] read_token_file`'s; without either file configured it is not served.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Endpoint;
use super::api::{Admin, ApiError, bearer, same_token};
use crate::executor::kept::{self, OutputFile, Standing};

/// How often a followed run's file is read again.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Default, serde::Deserialize)]
pub struct OutputQuery {
    /// The node that ran it; default: this one.
    #[serde(default)]
    pub node: Option<String>,
    /// `1`: stream a live run until it ends.
    #[serde(default)]
    pub follow: Option<String>,
}

/// Refuses a read of output unless it carries the admin token or the read token.
pub fn authorize_read(endpoint: &Endpoint, headers: &HeaderMap) -> Result<String, ApiError> {
    let tokens: Vec<&str> = [
        match &endpoint.admin {
            Admin::Token(token) => Some(token.as_str()),
            Admin::Off => None,
        },
        endpoint.read_token.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if tokens.is_empty() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "runs' output is not served over HTTP by this node: it can hold secrets, and no token \
             is set; set [http] read_token_file (or admin_token_file) in zkcron.toml to a file \
             holding a token (mode 0600, e.g. made by `openssl rand -hex 32`), restart zkcron, \
             and send it as `Authorization: Bearer <token>`; on the node's host, `zkcron logs` \
             reads it from the state dir",
        ));
    }
    let Some(given) = bearer(headers) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a run's output needs a token: send `Authorization: Bearer <token>` (the token in \
             [http] read_token_file or admin_token_file)",
        ));
    };
    if !tokens.iter().any(|token| same_token(given, token)) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "wrong token: send the one in [http] read_token_file or admin_token_file",
        ));
    }
    Ok(given.to_string())
}

/// The handler.
pub async fn serve(
    State(endpoint): State<Endpoint>,
    Path(fire_id): Path<String>,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = authorize_read(&endpoint, &headers) {
        return e.into_response();
    }
    let follow = matches!(query.follow.as_deref(), Some("1" | "true"));
    let here = endpoint.cache.source.node_id().to_string();
    let answer = match query.node.filter(|n| *n != here) {
        Some(node) => proxy(&endpoint, &node, &fire_id, follow).await,
        None => local(&endpoint, &here, &fire_id, follow),
    };
    // Not to be had from the node that ran it: the last lines stored with its failure, if any.
    match answer {
        Err(refused) => match stored(&endpoint, &fire_id).await {
            Some(stored) => stored,
            None => refused.into_response(),
        },
        Ok(answer) => answer,
    }
}

/// The last lines stored with a failed run `fire_id` in its task's history, as a kept output
/// (`x-zkcron-run: stored`): what is left when the node that ran it cannot be asked.
async fn stored(endpoint: &Endpoint, fire_id: &str) -> Option<Response> {
    let history = endpoint.cache.history(kept::task_of(fire_id)).await.ok()?;
    let run = history.iter().rev().find(|run| run.fire_id == fire_id)?;
    let tail = run.output_tail.as_ref()?;
    let at = run.started_at.timestamp_millis();
    let mut text = format!(
        "{} {fire_id} {}\n",
        kept::HEADER,
        kept::file_name(&run.node)
    );
    for line in tail.lines() {
        text.push_str(&format!("{at} o {line}\n"));
    }
    let exit = crate::ops::render::outcome(run.success, run.exit_code, run.signal);
    text.push_str(&format!("{} x {exit}\n", at + run.duration_ms as i64));
    let mut response = answer(Standing::Ended, Body::from(text));
    response
        .headers_mut()
        .insert(kept::RUN_HEADER, HeaderValue::from_static("stored"));
    Some(response)
}

/// This node's own kept output of `fire_id`; `Err`: none to be had here.
fn local(
    endpoint: &Endpoint,
    here: &str,
    fire_id: &str,
    follow: bool,
) -> Result<Response, ApiError> {
    let Some(store) = &endpoint.output else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("node {here} keeps no runs' output ([log] output_limit = 0)"),
        ));
    };
    let file = match OutputFile::open(&store.path(fire_id)) {
        Ok(Some(file)) => file,
        Ok(None) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "node {here} keeps no output of run {fire_id}: it did not run it, or the run \
                     is older than the [scheduler] history_runs it keeps"
                ),
            ));
        }
        Err(message) => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)),
    };
    let standing = match file.standing_now() {
        Ok(standing) => standing,
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            ));
        }
    };
    // Streamed a chunk at a time, whatever the file's size; with `follow`, until the run ends.
    let clock = endpoint.cache.source.clock();
    let stream = futures::stream::unfold(Some(file), move |file| async move {
        let mut file = file?;
        loop {
            let polled = match file.poll() {
                Ok(polled) => polled,
                Err(e) => return Some((Err(e), None)),
            };
            let mut bytes = polled.bytes;
            match polled.standing {
                Standing::Live if polled.more => return Some((Ok(bytes), Some(file))),
                Standing::Live if !follow => {
                    return (!bytes.is_empty()).then_some((Ok(bytes), None));
                }
                Standing::Live if bytes.is_empty() => tokio::time::sleep(FOLLOW_POLL).await,
                Standing::Live => return Some((Ok(bytes), Some(file))),
                Standing::Ended => return (!bytes.is_empty()).then_some((Ok(bytes), None)),
                Standing::Incomplete => {
                    let at = clock.now().timestamp_millis();
                    bytes.extend_from_slice(kept::incomplete_record(at).as_bytes());
                    return Some((Ok(bytes), None));
                }
            }
        }
    });
    Ok(answer(
        if follow { Standing::Live } else { standing },
        Body::from_stream(stream),
    ))
}

fn answer(standing: Standing, body: Body) -> Response {
    let mut response =
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
    response.headers_mut().insert(
        kept::RUN_HEADER,
        HeaderValue::from_static(standing.as_str()),
    );
    response
}

/// `node`'s kept output of `fire_id`, read from its endpoint.
async fn proxy(
    endpoint: &Endpoint,
    node: &str,
    fire_id: &str,
    follow: bool,
) -> Result<Response, ApiError> {
    // This node's own read token, never the caller's (which may be the admin token): another
    // node is asked only for what a reader may read.
    let Some(token) = endpoint.read_token.as_deref() else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "run {fire_id} ran on node {node}: this node reads other nodes' output with its \
                 own [http] read_token_file, and has none; set it (the same token on every node), \
                 or ask node {node} itself"
            ),
        ));
    };
    let advertised = super::api::snapshot(endpoint).await.map(|snapshot| {
        snapshot
            .members
            .iter()
            .find(|m| m.record.id == node)
            .and_then(|m| m.record.http.clone())
    });
    let address = match advertised {
        Ok(Some(address)) => address,
        Ok(None) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "node {node} is not live or serves no HTTP endpoint: its runs' output stays \
                     in its state dir; run `zkcron logs` on its host"
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    match crate::ops::logs::request(&address, fire_id, None, follow, token).await {
        Ok((200, standing, body)) => {
            let standing = match standing.as_deref() {
                Some("ended") => Standing::Ended,
                Some("incomplete") => Standing::Incomplete,
                _ => Standing::Live,
            };
            Ok(answer(standing, Body::from_stream(body)))
        }
        Ok((status, _, body)) => {
            let message = crate::ops::logs::error_of(body).await;
            Err(ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                format!("node {node} at {address} answered {status}: {message}"),
            ))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("cannot read run {fire_id}'s output from node {node} at {address}: {e:#}"),
        )),
    }
}
