//! Log output: human-readable text on stderr, JSON lines, or the systemd journal.
//!
//! `[log] format = "auto"` (the default) writes to the journal when stderr is connected to it
//! (`JOURNAL_STREAM` is set, as systemd does for services) and text otherwise. The level comes
//! from `ZKCRON_LOG` or `RUST_LOG` in `tracing` filter syntax, default `info`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

use crate::config::LogFormat;

/// Installs the global subscriber. Call once, before anything logs.
pub fn init(format: LogFormat) {
    let spec = ["ZKCRON_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().map(|spec| (name, spec)));
    // A filter that does not parse is said once logging works, not dropped in silence.
    let (filter, refused) = match spec {
        Some((name, spec)) => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (EnvFilter::new("info"), Some((name, spec, error))),
        },
        None => (EnvFilter::new("info"), None),
    };
    let format = format.resolve();
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journald) => registry
                .with(journald.with_syslog_identifier("zkcron".into()))
                .init(),
            Err(error) => {
                registry
                    .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
                    .init();
                tracing::warn!("cannot connect to the journal ({error}); logging to stderr");
            }
        },
        LogFormat::Text | LogFormat::Auto => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
    if let Some((name, spec, error)) = refused {
        tracing::warn!(
            "{name}={spec:?} is not a log filter ({error}); logging at info instead. Write a \
             level (debug) or level and targets (info,zkcron::job=warn)"
        );
    }
}
