//! Runs one tick's command.
