#!/usr/bin/env bash
# The three-language example (examples/bus/three-languages.tb, docs/BUS.md): a Python
# producer, a Java transformer and a Rust consumer pass a value (100 MB by default) by
# reference through a real `viastack bus serve`.
#
#   examples/bus/run.sh [BYTES]        # e.g. examples/bus/run.sh 3000000
#
# Builds what it needs (release viastack and bus-consumer, the Java client with javac),
# runs the bus with --trace, prints the tools' reports and the time, and exits non-zero
# unless the consumer's check passed and both values travelled as references.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
bytes=${1:-100000000}
target=${CARGO_TARGET_DIR:-$root/target}

for tool in python3 javac java cargo; do
  command -v "$tool" >/dev/null 2>&1 || { echo "run.sh: $tool is needed (scripts/setup.sh installs it)"; exit 2; }
done

echo "== building (release viastack and bus-consumer, the Java client)"
# Two builds, not one: each package alone reuses the artifacts its usual build left.
cargo build --quiet --release -p viastack-cli --bin viastack
cargo build --quiet --release -p viastack-examples --bin bus-consumer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
javac -d "$work/classes" clients/java/src/main/java/org/viastack/bus/*.java examples/bus/Transformer.java

sed "s/toolbus(Main([0-9]*))/toolbus(Main($bytes))/" examples/bus/three-languages.tb > "$work/three-languages.tb"
export VIASTACK_EXAMPLE="$root/examples/bus"
export VIASTACK_JAVA_CP="$work/classes"
export VIASTACK_BUS_CONSUMER="$target/release/bus-consumer"

echo "== running the bus with a $bytes-byte value"
# The bus's peak resident set (GNU time, when installed): it stays flat whatever the size,
# since only references go through it.
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f "bus peak RSS: %M KB" -o "$work/rss")
start=$(date +%s%N)
"${timer[@]}" "$target/release/viastack" bus serve --listen "unix:$work/bus.sock" --trace "$work/three-languages.tb" > "$work/trace"
end=$(date +%s%N)
[ -f "$work/rss" ] && cat "$work/rss"

# What the script bound: V (the producer's value) and W (the transformer's) must be
# references, R the consumer's verdict ok(BYTES, 1).
python3 - "$work/trace" "$bytes" "$(( (end - start) / 1000000 ))" <<'PY'
import json, sys
path, want, ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
binds = {}
for line in open(path):
    if line.startswith("{"):
        for k, v in json.loads(line).get("binds", {}).items():
            binds.setdefault(k, v)
ok = True
for var, who in (("V", "Python producer"), ("W", "Java transformer")):
    v = binds.get(var, "")
    print(f"{var} (from the {who}): {v[:90]}")
    ok &= v.startswith("@ref(")
r = binds.get("R", "")
print(f"R (the Rust consumer's verdict): {r}")
ok &= r == f"ok({want},1)"
print(f"three-language example: {'PASSED' if ok else 'FAILED'}: {want} bytes, "
      f"bus start to end {ms} ms")
sys.exit(0 if ok else 1)
PY
