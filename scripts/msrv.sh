#!/bin/sh
# Checks that the workspace builds with the toolchain `rust-version` in Cargo.toml names
# (installs it with rustup first). Not part of `.ci/run` (a full check takes ~9 minutes on
# two cores); run it when a dependency or a language feature is added.
set -eu
cd "$(dirname "$0")/.."
v=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
rustup toolchain install "$v" --profile minimal
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/msrv" cargo "+$v" check --workspace --all-targets
echo "the workspace builds with rust $v"
