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
    let filter = std::env::var("ZKCRON_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
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
}
