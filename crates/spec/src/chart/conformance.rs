//! The W3C SCXML conformance suite runner.
