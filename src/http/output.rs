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
use subtle::ConstantTimeEq;

use super::Endpoint;
use super::api::{Admin, ApiError, error};
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
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(given) = given else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a run's output needs a token: send `Authorization: Bearer <token>` (the token in \
             [http] read_token_file or admin_token_file)",
        ));
    };
    if !tokens
        .iter()
        .any(|token| bool::from(given.as_bytes().ct_eq(token.as_bytes())))
    {
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
    let token = match authorize_read(&endpoint, &headers) {
        Ok(token) => token,
        Err(e) => return e.into_response(),
    };
    let follow = matches!(query.follow.as_deref(), Some("1" | "true"));
    let here = endpoint.cache.source.node_id().to_string();
    match query.node.filter(|n| *n != here) {
        Some(node) => proxy(&endpoint, &node, &fire_id, follow, &token).await,
        None => local(&endpoint, &here, &fire_id, follow),
    }
}

/// This node's own kept output of `fire_id`.
fn local(endpoint: &Endpoint, here: &str, fire_id: &str, follow: bool) -> Response {
    let Some(store) = &endpoint.output else {
        return error(
            StatusCode::NOT_FOUND,
            format!("node {here} keeps no runs' output ([log] output_limit = 0)"),
        );
    };
    let mut file = match OutputFile::open(&store.path(fire_id)) {
        Ok(Some(file)) => file,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "node {here} keeps no output of run {fire_id}: it did not run it, or the run \
                     is older than the [scheduler] history_runs it keeps"
                ),
            );
        }
        Err(message) => return error(StatusCode::INTERNAL_SERVER_ERROR, message),
    };
    let now = || endpoint.now().timestamp_millis();
    if !follow {
        let mut bytes = match file.read_new() {
            Ok(bytes) => bytes,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let standing = file.standing();
        if standing == Standing::Incomplete {
            bytes.extend_from_slice(kept::incomplete_record(now()).as_bytes());
        }
        return answer(standing, Body::from(bytes));
    }
    let clock = endpoint.cache.source.clock();
    let stream = futures::stream::unfold(Some(file), move |file| async move {
        let mut file = file?;
        loop {
            let mut bytes = match file.read_new() {
                Ok(bytes) => bytes,
                Err(e) => return Some((Err(e), None)),
            };
            match file.standing() {
                Standing::Live if bytes.is_empty() => tokio::time::sleep(FOLLOW_POLL).await,
                Standing::Live => return Some((Ok(bytes), Some(file))),
                Standing::Ended => return (!bytes.is_empty()).then_some((Ok(bytes), None)),
                Standing::Incomplete => {
                    // What its writer wrote just before it let go.
                    bytes.extend(file.read_new().unwrap_or_default());
                    let at = clock.now().timestamp_millis();
                    bytes.extend_from_slice(kept::incomplete_record(at).as_bytes());
                    return Some((Ok(bytes), None));
                }
            }
        }
    });
    answer(Standing::Live, Body::from_stream(stream))
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
    token: &str,
) -> Response {
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
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "node {node} is not live or serves no HTTP endpoint: its runs' output stays \
                     in its state dir; run `zkcron logs` on its host"
                ),
            );
        }
        Err(e) => return e.into_response(),
    };
    match crate::ops::logs::request(&address, fire_id, None, follow, token).await {
        Ok((200, standing, body)) => {
            let standing = match standing.as_deref() {
                Some("ended") => Standing::Ended,
                Some("incomplete") => Standing::Incomplete,
                _ => Standing::Live,
            };
            answer(standing, Body::from_stream(body))
        }
        Ok((status, _, body)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                Body::from_stream(body),
            )
                .into_response()
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            format!("cannot read run {fire_id}'s output from node {node} at {address}: {e:#}"),
        ),
    }
}
