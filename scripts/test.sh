#!/usr/bin/env bash
# viastack's whole test suite: what the README's test command runs, and what CI runs.
# Simulation tests loop over many seeds and print the failing seed; nothing here is timed.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests need beyond Rust (network namespace tools, python3), installed when possible.
./scripts/setup.sh

# Rust: unit, integration and CLI tests of every crate (tests build with opt-level 1, see
# Cargo.toml, so the seed loops finish quickly).
cargo test --workspace --all-targets
cargo test --workspace --doc

# Python client: decodes the shared wire vectors (stdlib only), proving the formats are
# language-neutral.
if command -v python3 >/dev/null 2>&1; then
  python3 -m unittest discover -s clients/python/tests
else
  echo "skipped: the Python client's tests (python3 is not installed)"
fi
