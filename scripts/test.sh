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

# Java client (clients/java, JDK 17 + Maven): the shared vectors and Java tools against a real
# `viastack bus serve` (the binary cargo built above, through $VIASTACK_BIN). Maven fetches
# JUnit once into ~/.m2; afterwards the tests run offline. The three-language example
# (Python -> Java -> Rust) runs among the Rust tests (examples/tests/bus_three_languages.rs).
if command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; then
  bin="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/viastack"
  offline=()
  [ -d "$HOME/.m2/repository/org/junit/jupiter" ] && offline=(-o)
  (cd clients/java && VIASTACK_BIN="${VIASTACK_BIN:-$bin}" mvn -q -B "${offline[@]}" test)
else
  echo "skipped: the Java client's tests (a JDK and Maven are not installed)"
fi
