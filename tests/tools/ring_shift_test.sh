#!/bin/bash
# The ring shift of benchmarks/api_latency.cc (native and mpi backends, under mpcomm launch) and of
# benchmarks/plain_mpi.c (under mpirun), 3 ranks, a few sizes: every program runs, prints one row per size,
# and its checked call delivered rank - 1's data to every rank ("wrong": 0). scripts/perf-check
# --plain-sendrecv compares their times; this checks that what it times is right.
#   ring_shift_test.sh BUILD_DIR
set -u
build=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
args=(-o sendrecv -b 60K -e 1M -f 4 -n 3 -w 1)  # 60 KiB, 240 KiB, 960 KiB: below and above the single-copy sizes
want=3
check() {  # check NAME FILE
  python3 - "$1" "$2" "$want" <<'PY' || fail=1
import json, sys
name, path, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(path) if l.strip()]
bad = [r for r in rows if r["op"] != "sendrecv" or r["wrong"] != 0 or not r["median_us"] > 0 or r["ranks"] != 3]
if len(rows) != want or bad:
    sys.exit("%s: %d rows (want %d), wrong or empty: %s" % (name, len(rows), want, bad))
print("%s: %d rows, every byte right" % (name, len(rows)))
PY
}
for backend in native mpi; do
  if [ "$backend" = mpi ] && ! command -v mpirun >/dev/null; then echo "mpi: no mpirun, skipped"; continue; fi
  MPCOMM_TIMEOUT=60 "$build/mpcomm" launch -n 3 --backend "$backend" -- "$build/benchmarks/api_latency" "${args[@]}" \
    -j "$out/$backend.jsonl" >/dev/null || { echo "api_latency on $backend failed"; fail=1; continue; }
  check "api_latency $backend" "$out/$backend.jsonl"
done
if [ -x "$build/benchmarks/plain_mpi" ]; then
  root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  timeout 120 mpirun -n 3 "${root[@]}" --oversubscribe --mca pml ob1 --mca btl vader,self \
    "$build/benchmarks/plain_mpi" "${args[@]}" -j "$out/plain.jsonl" >/dev/null || { echo "plain_mpi failed"; fail=1; }
  [ -f "$out/plain.jsonl" ] && check "plain_mpi" "$out/plain.jsonl"
fi
exit $fail
