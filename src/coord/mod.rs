//! coordination
