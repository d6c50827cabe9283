//! The node configuration, `zkcron.toml`.
