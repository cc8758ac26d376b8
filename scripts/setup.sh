#!/usr/bin/env bash
# Installs what viastack's test suite needs beyond a Rust toolchain, when it can: as root on a
# Debian-like machine, with apt. Otherwise it says what is missing and which tests will skip;
# those tests print the reason when they run (CI refuses the skip: see .ci/run).
#
# Needed: python3 (the Python client's vector tests), a JDK 17 and Maven (the Java client's
# tests and the three-language bus example), iproute2 and nftables (tests that build private
# network namespaces: the SP ECN test marks datagrams CE with an nftables rule).
set -euo pipefail

missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "setup: missing ${missing[*]} and cannot install them (needs root and apt-get);"
  echo "setup: the tests that need them will print why they skip"
fi
