//! Deterministic simulator (placeholder).
