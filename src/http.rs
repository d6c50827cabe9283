//! The HTTP endpoint (`[http] listen`, docs/metrics.md and docs/operating.md), served with
//! axum:
//!
//! - `/metrics`: [`Metrics`] in OpenMetrics text to a client that asks for it (Prometheus), else
//!   in the Prometheus text format 0.0.4;
//! - `/healthz`: 200 when this node can fire (the local backend, or a connected ZooKeeper
//!   session with a clock within `max_clock_skew`), else 503; the body says why ([`health`]);
//! - `/status`: this node's view of the cluster as `zkcron status --json` prints it;
//! - `/`, `/tasks/<task>`, `/nodes/<node>`, `/runs/<fire id>`: the dashboard ([`pages`], with
//!   its [`assets`]; a run's page in [`run_page`]);
//! - `/api/...`: the HTTP API ([`api`]); both read the [`source`] through one [`cache`];
//! - `/api/runs/<fire id>/output`: a run's output, with a token ([`output`]).
//!
//! The dashboard's files beside [`pages`]: [`task_page`] (a task's page), [`chart`] (its runs'
//! duration and lateness in inline SVG), [`words`] (a schedule in words).
//!
//! The endpoint is an observer: a daemon that cannot serve it (the port is taken) logs that at
//! error and keeps firing ([`serve_logged`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod api;
pub mod assets;
pub mod cache;
pub mod chart;
pub mod output;
pub mod pages;
pub mod run_page;
pub mod source;
pub mod task_page;
pub mod words;

use crate::clock::Clock;
use crate::coord::local::LocalCoordinator;
use crate::coord::zk::ZkCoordinator;
use crate::coord::zk::settings::{DEFAULT_MAX_CLOCK_SKEW, ZkSettings};
use crate::coord::{Coordinator, Leadership};
use crate::daemon::LoadedTasks;
use crate::daemon::control::ControlConfig;
use crate::metrics::Metrics;
use crate::ops::model::StatusSource;

/// Which backend the node uses, for `/healthz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded local backend: the node always fires.
    Local,
    /// ZooKeeper: the node fires while its session is connected and its clock is within
    /// `max_clock_skew` of ZooKeeper's.
    Zookeeper { max_clock_skew: Duration },
}

/// What the endpoint serves.
#[derive(Clone)]
pub struct Endpoint {
    pub metrics: Metrics,
    pub leadership: watch::Receiver<Leadership>,
    pub backend: Backend,
    pub status: StatusSource,
    /// What the dashboard and the API read and change.
    pub cache: Arc<cache::Cache>,
    pub admin: api::Admin,
    /// `[http] read_token_file`'s token: it reads runs' output, as the admin token does.
    pub read_token: Option<String>,
    /// Where this node keeps its runs' output (`None`: nowhere).
    pub output: Option<crate::executor::OutputStore>,
}

impl Endpoint {
    /// The local backend's: `/status` is the control socket's `status`
    /// ([`crate::daemon::control::status`]).
    pub fn local(
        metrics: &Metrics,
        coordinator: &Arc<LocalCoordinator>,
        control: ControlConfig,
        admin: api::Admin,
    ) -> Endpoint {
        let cache = Arc::new(cache::Cache::new(source::Source::Local {
            config: control.clone(),
            coordinator: coordinator.clone(),
        }));
        let config = Arc::new(control);
        let source = coordinator.clone();
        let status: StatusSource = Arc::new(move || {
            let coordinator = source.clone();
            let config = config.clone();
            Box::pin(async move { Ok(crate::daemon::control::status(&config, &coordinator).await) })
        });
        Endpoint {
            metrics: metrics.clone(),
            leadership: coordinator.leadership(),
            backend: Backend::Local,
            status,
            cache,
            admin,
            read_token: None,
            output: None,
        }
    }

    /// The ZooKeeper backend's: `/status` reads the cluster as `zkcron status` does
    /// ([`crate::ops::cluster::status_source`]).
    pub fn zookeeper(
        metrics: &Metrics,
        coordinator: &ZkCoordinator,
        settings: &ZkSettings,
        loaded: LoadedTasks,
        admin: api::Admin,
        clock: Clock,
    ) -> Endpoint {
        Endpoint {
            cache: Arc::new(cache::Cache::new(source::Source::Cluster {
                settings: settings.clone(),
                loaded,
                clock,
            })),
            admin,
            read_token: None,
            output: None,
            metrics: metrics.clone(),
            leadership: coordinator.leadership(),
            backend: Backend::Zookeeper {
                max_clock_skew: settings.max_clock_skew.unwrap_or(DEFAULT_MAX_CLOCK_SKEW),
            },
            status: crate::ops::cluster::status_source(
                &settings.connect,
                &settings.cluster,
                &settings.auth,
                settings.tls.as_ref(),
                clock,
            ),
        }
    }
}

impl Endpoint {
    /// The current time on the daemon's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.cache.source.clock().now()
    }
}

/// Whether this node can fire: `Ok` with a line saying so, or `Err` with the reason.
pub fn health(
    backend: Backend,
    leadership: &Leadership,
    metrics: &Metrics,
) -> Result<String, String> {
    let max_clock_skew = match backend {
        Backend::Local => return Ok("ok: local backend".into()),
        Backend::Zookeeper { max_clock_skew } => max_clock_skew,
    };
    let why = || {
        leadership
            .why_paused
            .clone()
            .unwrap_or_else(|| "no ZooKeeper session".into())
    };
    if !metrics.zk_connected() {
        return Err(format!("not connected to ZooKeeper: {}", why()));
    }
    if leadership.paused {
        return Err(format!("paused: {}", why()));
    }
    let skew = metrics.clock_skew_seconds();
    if let Some(skew) = skew
        && skew.abs() > max_clock_skew.as_secs_f64()
    {
        return Err(format!(
            "this node's clock is {skew:+.3}s off ZooKeeper's, beyond max_clock_skew ({}): it \
             leads nothing; fix NTP",
            humantime::format_duration(max_clock_skew)
        ));
    }
    let skew = skew.map_or("not measured yet".into(), |s| format!("{s:+.3}s"));
    Ok(format!(
        "ok: connected to ZooKeeper, clock skew {skew}, leading {} task(s)",
        leadership.tasks.len()
    ))
}

/// The metrics in OpenMetrics text to a client that accepts it (Prometheus asks for it
/// first), else in the text format 0.0.4 (`curl`, `promtool check metrics`, older scrapers).
async fn metrics(State(endpoint): State<Endpoint>, headers: HeaderMap) -> Response {
    let text = endpoint.metrics.encode();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if accepts_openmetrics(accept) {
        let openmetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        return ([(header::CONTENT_TYPE, openmetrics)], text).into_response();
    }
    let classic = crate::metrics::classic::from_openmetrics(&text);
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], classic).into_response()
}

/// Whether an `Accept` header names OpenMetrics text with a weight above 0.
fn accepts_openmetrics(accept: Option<&str>) -> bool {
    accept.into_iter().flat_map(|a| a.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let zero = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        media.eq_ignore_ascii_case("application/openmetrics-text") && !zero
    })
}

async fn healthz(State(endpoint): State<Endpoint>) -> Response {
    let leadership = endpoint.leadership.borrow().clone();
    match health(endpoint.backend, &leadership, &endpoint.metrics) {
        Ok(text) => (StatusCode::OK, format!("{text}\n")).into_response(),
        Err(text) => (StatusCode::SERVICE_UNAVAILABLE, format!("{text}\n")).into_response(),
    }
}

async fn status(State(endpoint): State<Endpoint>) -> Response {
    match (endpoint.status)().await {
        Ok(status) => {
            let mut text = serde_json::to_string_pretty(&status).expect("a status serializes");
            text.push('\n');
            ([(header::CONTENT_TYPE, "application/json")], text).into_response()
        }
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response(),
    }
}

/// Anything else: JSON under `/api/`, a page elsewhere.
async fn not_found(uri: axum::http::Uri) -> Response {
    let message = format!("there is nothing at {}", uri.path());
    if uri.path().starts_with("/api/") {
        api::error(StatusCode::NOT_FOUND, message)
    } else {
        pages::error_page(StatusCode::NOT_FOUND, &message)
    }
}

/// The served endpoint; dropping it stops serving.
pub struct HttpServer {
    pub address: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `endpoint` on `address`.
pub async fn serve(address: SocketAddr, endpoint: Endpoint) -> std::io::Result<HttpServer> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    serve_on(listener, endpoint)
}

/// Serves `endpoint` on a bound `listener`.
pub fn serve_on(
    listener: tokio::net::TcpListener,
    endpoint: Endpoint,
) -> std::io::Result<HttpServer> {
    let address = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/status", get(status))
        .route("/", get(pages::overview))
        .route("/tasks/{task}", get(task_page::page))
        .route("/nodes/{node}", get(pages::node))
        .route("/runs/{fire_id}", get(run_page::page))
        .route("/assets/{file}", get(assets::serve))
        .route("/api/status", get(api::status))
        .route("/api/tasks/{task}", get(api::task))
        .route("/api/tasks/{task}/ticks", get(api::ticks))
        .route("/api/nodes/{node}", get(api::node))
        .route("/api/runs/{fire_id}/output", get(output::serve))
        .route("/api/tasks/{task}/{action}", post(api::task_action))
        .route("/api/nodes/{node}/{action}", post(api::node_action))
        .fallback(not_found)
        .with_state(endpoint);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%address, %error, "the HTTP endpoint stopped serving");
        }
    });
    Ok(HttpServer { address, task })
}

/// Binds `listen` (`[http] listen`; `None` binds nothing). A daemon that cannot bind it says
/// so at error, with the fix, and runs on: metrics are not worth a tick.
pub async fn bind_logged(listen: Option<SocketAddr>) -> Option<tokio::net::TcpListener> {
    let Some(address) = listen else {
        tracing::info!("HTTP endpoint off ([http] listen = \"\")");
        return None;
    };
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::error!(
                %address,
                %error,
                "cannot serve the HTTP endpoint on {address} ({error}): no /metrics, /healthz or \
                 /status from this node, which fires its tasks all the same; stop what holds \
                 the port, or set [http] listen in zkcron.toml to a free address (\"\" turns the \
                 endpoint off)"
            );
            None
        }
    }
}

/// The address other nodes reach `listener` at: its own, or this host's name with its port
/// when it listens on every address.
pub fn advertised(listener: &tokio::net::TcpListener, host: &str) -> Option<String> {
    let address = listener.local_addr().ok()?;
    Some(if address.ip().is_unspecified() {
        format!("{host}:{}", address.port())
    } else {
        address.to_string()
    })
}

/// Serves `endpoint` on `listen` (`[http] listen`; `None` serves nothing), logging where.
pub async fn serve_logged(listen: Option<SocketAddr>, endpoint: Endpoint) -> Option<HttpServer> {
    serve_listener_logged(bind_logged(listen).await?, endpoint)
}

/// Serves `endpoint` on a bound `listener`, logging where (or why not).
pub fn serve_listener_logged(
    listener: tokio::net::TcpListener,
    endpoint: Endpoint,
) -> Option<HttpServer> {
    let changes_on = matches!(endpoint.admin, api::Admin::Token(_));
    match serve_on(listener, endpoint) {
        Ok(server) => {
            tracing::info!(
                address = %server.address,
                "serving /metrics, /healthz and /status on http://{}",
                server.address
            );
            tracing::info!(
                address = %server.address,
                "the dashboard is at http://{}/ and the API under /api/ (changes {})",
                server.address,
                if changes_on { "on: [http] admin_token_file is set" } else { "off: no [http] admin_token_file" }
            );
            Some(server)
        }
        Err(error) => {
            tracing::error!(%error, "cannot serve the HTTP endpoint ({error}): this node fires its tasks all the same");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zk() -> Backend {
        Backend::Zookeeper {
            max_clock_skew: Duration::from_secs(2),
        }
    }

    #[test]
    fn metrics_are_openmetrics_only_for_a_client_that_accepts_them() {
        // Prometheus's own Accept header, then what curl and promtool send.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(accepts_openmetrics(Some(prometheus)));
        assert!(accepts_openmetrics(Some("Application/OpenMetrics-Text")));
        for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4")] {
            assert!(!accepts_openmetrics(accept), "{accept:?}");
        }
        let refused = "application/openmetrics-text; q=0, text/plain";
        assert!(!accepts_openmetrics(Some(refused)));
    }

    #[test]
    fn the_local_backend_is_always_healthy() {
        let metrics = Metrics::new();
        let paused = Leadership {
            paused: true,
            ..Leadership::default()
        };
        assert_eq!(
            health(Backend::Local, &paused, &metrics),
            Ok("ok: local backend".into())
        );
    }

    #[test]
    fn a_node_without_a_session_is_unhealthy_and_says_why() {
        let metrics = Metrics::new();
        let leadership = Leadership {
            paused: true,
            why_paused: Some("cannot reach ZooKeeper at 127.0.0.1:1".into()),
            ..Leadership::default()
        };
        assert_eq!(
            health(zk(), &leadership, &metrics),
            Err("not connected to ZooKeeper: cannot reach ZooKeeper at 127.0.0.1:1".into())
        );
    }

    #[test]
    fn a_clock_beyond_max_clock_skew_is_unhealthy() {
        let metrics = Metrics::new();
        metrics.set_zk_connected(true);
        let leadership = Leadership::default();
        assert!(
            health(zk(), &leadership, &metrics)
                .unwrap()
                .starts_with("ok: connected")
        );
        metrics.set_clock_skew_ms(Some(-3_500));
        assert_eq!(
            health(zk(), &leadership, &metrics),
            Err(
                "this node's clock is -3.500s off ZooKeeper's, beyond max_clock_skew (2s): it \
                 leads nothing; fix NTP"
                    .into()
            )
        );
    }
}
