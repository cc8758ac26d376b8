//! The SCXML state-chart language: reader, validator, verifier, compiler and engine.
