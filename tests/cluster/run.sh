#!/usr/bin/env bash
# Tests on a mini-cluster (scripts/minicluster): mpcomm's tools and programs as ranks of real jobs —
# Slurm's srun and sbatch, Open MPI's mpirun, torchrun, mpcomm launch --nnodes — on network hosts of
# their own (network namespaces on a bridge, each with its hostname), never over loopback between hosts.
#
#   tests/cluster/run.sh STEP      STEP: selftest | bench | train | faults | torch | launch | elastic | strangers | tls
#
# Environment: MPCOMM_TEST_CLI (the mpcomm executable), MPCOMM_TEST_PROG (tests/errors/testprog, for `tls`),
# MPCOMM_TEST_ELASTIC_PROG (tests/elastic/elastic_prog, for `elastic`),
# MPCOMM_TEST_PYTHONPATH (the built python package, for `torch`), MINICLUSTER (scripts/minicluster). Exit 0 on success, 77 when the machine cannot host the
# cluster (not root, no network namespaces, no Slurm), 1 with the reason on stderr otherwise.
# The cluster is torn down on every way out, and each step checks that no rank process is left on any
# host and no shared-memory segment of its jobs in /dev/shm.
set -euo pipefail

STEP=${1:?usage: run.sh selftest|bench|train|faults|torch|launch|elastic|strangers|tls}
HERE=$(cd "$(dirname "$0")" && pwd)
CLI=${MPCOMM_TEST_CLI:?set MPCOMM_TEST_CLI to the mpcomm executable}
MC=${MINICLUSTER:-$HERE/../../scripts/minicluster}
NAME=mc$(printf '%04x' $((RANDOM % 65536)))
JOB=cl$$                                  # MPCOMM_JOB_ID of every rank: names their shared memory
WORK=$(mktemp -d /tmp/mpcomm-cluster-XXXXXX)
T0=$SECONDS

say() { echo "cluster/$STEP: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
cleanup() {
  local rc=$?
  [[ -n ${NAME:-} ]] && "$MC" down --name "$NAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
  rm -f /dev/shm/mpcomm."$JOB"* 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT

HOSTS=2
[[ $STEP == strangers ]] && HOSTS=3  # the third host is the stranger's: in the cluster, not in the job
set +e
"$MC" up $HOSTS --name "$NAME" >"$WORK/env" 2>"$WORK/up.log"
rc=$?
set -e
if [[ $rc -eq 77 || $rc -eq 2 ]]; then
  echo "SKIP: the mini-cluster cannot run here: $(tail -1 "$WORK/up.log")"
  exit 77
fi
[[ $rc -eq 0 ]] || { cat "$WORK/up.log" >&2; fail "scripts/minicluster up 2 failed"; }
eval "$(cat "$WORK/env")"
read -r H0 H1 H2 <<<"$MINICLUSTER_HOSTS"
read -r A0 A1 A2 <<<"$MINICLUSTER_ADDRS"
# Every client runs inside a host: the mpcomm processes and Slurm's clients alike.
on() { local h=$1; shift; "$MC" exec "$h" -- env MPCOMM_JOB_ID=$JOB MPCOMM_TIMEOUT=${TMO:-60} "$@"; }
# Runs COMMAND inside host 0 with a deadline; its output to $WORK/out, echoed on failure.
run() {
  local what=$1; shift
  "$@" >"$WORK/out" 2>&1 &
  local pid=$! end=$((SECONDS + ${DEADLINE:-240}))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= end)); then
      pkill -TERM -P "$pid" 2>/dev/null || true
      tail -n 40 "$WORK/out" >&2
      fail "$what: not done after ${DEADLINE:-240} s"
    fi
    sleep 0.2
  done
  wait "$pid" || { tail -n 40 "$WORK/out" >&2; fail "$what"; }
}
expect() {  # expect PATTERN WHAT: $WORK/out must contain PATTERN
  grep -q -- "$1" "$WORK/out" || { tail -n 40 "$WORK/out" >&2; fail "$2 (no '$1' in the output)"; }
}
srun2() { on "$H0" srun -N 2 "$@"; }  # srun on the two hosts

# No rank process on any host, no shared memory of this run's jobs.
nothing_left() {
  local deadline=$((SECONDS + 15)) left
  while :; do
    left=""
    for h in $MINICLUSTER_HOSTS; do
      for pid in $(ip netns pids "$h" 2>/dev/null); do
        grep -qaE "$CLI|torch_ddp" "/proc/$pid/cmdline" 2>/dev/null && left+=" $h:$pid($(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-60))"
      done
    done
    shm=$(ls /dev/shm 2>/dev/null | grep -F "mpcomm.$JOB" || true)
    [[ -z $left && -z $shm ]] && return 0
    ((SECONDS < deadline)) || fail "left behind after $1:${left:+ processes$left}${shm:+ shared memory: $shm}"
    sleep 0.5
  done
}

# Bytes host $1 sent on its interface (/proc/net/dev is the reading process's namespace's; /sys is not).
# on_each_host NAME CMD...: CMD on both hosts at once, "{k}" in it replaced by the host's index; waits
# (200 s at most) for both and fails naming the host whose CMD failed. Output in $WORK/NAME<k>.out.
on_each_host() {
  local name=$1 k; shift
  local pids=()
  for k in 0 1; do
    local h=$H0 args=("${@//\{k\}/$k}")
    [[ $k -eq 1 ]] && h=$H1
    on "$h" "${args[@]}" >"$WORK/$name$k.out" 2>&1 &
    pids[k]=$!
  done
  for k in 0 1; do
    timeout 200 tail --pid="${pids[k]}" -f /dev/null || fail "$name on host $k did not end in 200 s"
    wait "${pids[k]}" || { tail -20 "$WORK/$name$k.out" >&2; fail "$name on host $k failed"; }
  done
}

tx_bytes() { "$MC" exec "$1" -- cat /proc/net/dev | awk '$1 == "eth0:" { print $10 }'; }

case $STEP in
selftest)
  # The conformance matrix with 2 ranks on each of 2 hosts: shared memory within, TCP between.
  for backend in native gloo; do
    run "srun selftest --conformance on $backend" srun2 --ntasks-per-node 2 env MPCOMM_BACKEND=$backend "$CLI" selftest --conformance
    expect "backend $backend, 4 ranks" "$backend conformance header"
    expect " 0 failed" "$backend conformance"
    say "srun -N 2 --ntasks-per-node 2 mpcomm selftest --conformance ($backend): ok"
  done
  # The mpi backend across the hosts through mpirun (Open MPI's own daemons, started through the
  # cluster's rsh agent); rank 0 serves mpcomm's store at MASTER_ADDR:MASTER_PORT.
  # shellcheck disable=SC2086
  run "mpirun selftest --conformance on mpi" on "$H0" mpirun $MINICLUSTER_MPIRUN_ARGS -H "$H0:2,$H1:2" -n 4 \
    -x MPCOMM_BACKEND=mpi -x MPCOMM_JOB_ID=$JOB -x MASTER_ADDR="$A0" -x MASTER_PORT=29533 "$CLI" selftest --conformance
  expect "backend mpi, 4 ranks" "mpi conformance header"
  expect " 0 failed" "mpi conformance"
  say "mpirun -H $H0:2,$H1:2 mpcomm selftest --conformance (mpi): ok"
  # A rank that offers a loopback address to another machine: every rank fails at once, naming it.
  started=$SECONDS
  if TMO=120 on "$H0" srun -N 2 --ntasks-per-node 1 env MPCOMM_ADDR=127.0.0.1 "$CLI" selftest -c 8 >"$WORK/out" 2>&1; then
    fail "ranks advertising 127.0.0.1 across machines did not fail"
  fi
  ((SECONDS - started <= 20)) || fail "the loopback refusal took $((SECONDS - started)) s (the timeout is 120 s)"
  expect "advertises 127.0.0.1" "the loopback refusal"
  expect "MPCOMM_IFNAME" "the loopback refusal names the variable"
  say "a loopback address offered to another machine: refused at once"
  nothing_left selftest
  ;;

bench)
  run "srun mpcomm bench" srun2 --ntasks-per-node 2 "$CLI" bench --backends native,gloo -b 1K -e 4M -f 64 -n 5 -w 1
  expect "side by side: allreduce, float32 sum, 4 ranks on 2 host(s)" "the side-by-side table of 4 ranks on 2 hosts"
  [[ $(grep -c "side by side" "$WORK/out") -eq 1 ]] || fail "more than rank 0 printed the tables"
  ! grep -q " [1-9][0-9]* wrong" "$WORK/out" || fail "wrong elements"
  say "srun -N 2 --ntasks-per-node 2 mpcomm bench: ok"
  # Flags that only make sense on one machine are refused under a launcher.
  if srun2 --ntasks-per-node 1 "$CLI" bench --ranks 8 >"$WORK/out" 2>&1; then fail "--ranks under srun was accepted"; fi
  expect "--ranks is for runs that start their ranks on this machine" "the refusal of --ranks"
  # The bytes go over the hosts' interfaces: 1 rank per host, 16 MiB allreduce, 1 + 5 + 1 calls, each
  # sending at least 16 MiB per rank (a ring of 2: half out in the reduce-scatter, half in the allgather).
  b0=$(tx_bytes "$H0"); b1=$(tx_bytes "$H1")
  run "srun bench 16 MiB" srun2 --ntasks-per-node 1 "$CLI" bench -b 16M -e 16M -n 5 -w 1 -c 1
  d0=$(($(tx_bytes "$H0") - b0)); d1=$(($(tx_bytes "$H1") - b1))
  need=$((7 * 16 * 1024 * 1024))
  ((d0 >= need && d1 >= need)) || fail "interface counters grew by $d0 and $d1 bytes, less than $need"
  say "eth0 of each host sent $((d0 >> 20)) and $((d1 >> 20)) MiB for 7 allreduces of 16 MiB: ok"
  nothing_left bench
  ;;

train)
  # Tensor parallel within a node, pipeline across: the losses equal the run on one machine.
  DEADLINE=400
  run "the local run" "$CLI" train --launcher local --tp 2 --pp 2 --steps 4 --loss-log "$WORK/local.jsonl"
  run "sbatch train" on "$H0" sbatch --wait -N 2 --ntasks-per-node 2 -o "$WORK/job.out" \
    --wrap "srun $CLI train --tp 2 --pp 2 --steps 4 --loss-log $WORK/cluster.jsonl"
  cat "$WORK/job.out" >"$WORK/out"
  expect "4 ranks = tp 2 × pp 2 × dp 1 on 2 host(s)" "the job's header"
  /usr/bin/python3 - "$WORK/local.jsonl" "$WORK/cluster.jsonl" <<'EOF' || fail "losses differ"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"losses {a} vs {b}: max relative difference {worst:.2e}")
assert worst <= 1e-6, worst
EOF
  say "sbatch -N 2: mpcomm train tp 2 × pp 2 losses equal the local run's: ok"
  nothing_left train
  ;;

faults)
  TMO=6
  # 1. A host's link cut mid-all-reduce: every survivor fails within the timeout + 10 s, naming the
  #    rank and the host it waited for.
  on "$H0" srun -N 2 --ntasks-per-node 1 "$CLI" bench -b 64M -e 64M -n 100000 -w 0 -c 0 >"$WORK/out" 2>&1 &
  job=$!
  # Cut only once the allreduces run: the link carries 64 MiB more than when setup started.
  b1=$(tx_bytes "$H1")
  for _ in $(seq 300); do
    (($(tx_bytes "$H1") - b1 > 64 << 20)) && break
    kill -0 $job 2>/dev/null || { cat "$WORK/out" >&2; fail "the job ended before the cut"; }
    sleep 0.1
  done
  (($(tx_bytes "$H1") - b1 > 64 << 20)) || fail "no allreduce traffic on $H1 after 30 s"
  ip link set "${NAME}v1" down
  cut=$SECONDS
  # Slurm's own messages cross the same link: it comes back once the ranks must have given up, so that
  # srun hears how its tasks ended.
  sleep $((TMO + 3))
  ip link set "${NAME}v1" up
  timeout 60 tail --pid=$job -f /dev/null || fail "the job did not end 60 s after its link came back"
  wait $job && fail "the job survived its link being cut"
  took=$((SECONDS - cut))
  ((took <= TMO + 10)) || fail "the job took $took s to end after the cut (timeout $TMO s)"
  grep -qE "rank [01] on ${NAME}-h[01]" "$WORK/out" || { tail -20 "$WORK/out" >&2; fail "no error names the rank and its host"; }
  grep -E "rank [01] on ${NAME}-h[01]" "$WORK/out" | head -2 >&2
  say "link of $H1 cut mid-allreduce: failed in $took s, naming the rank and host: ok"
  nothing_left "the cut link"
  # 2. A rank SIGKILLed on one host: the survivors fail (peer failure), nothing left.
  on "$H0" srun -N 2 --ntasks-per-node 2 "$CLI" bench -b 1M -e 1M -n 1000000 -w 0 -c 0 >"$WORK/out" 2>&1 &
  job=$!
  victim=""
  for _ in $(seq 100); do
    for pid in $(ip netns pids "$H1"); do
      grep -qa "bench" "/proc/$pid/cmdline" 2>/dev/null && grep -qa "$CLI" "/proc/$pid/cmdline" && victim=$pid && break
    done
    [[ -n $victim ]] && break
    sleep 0.1
  done
  [[ -n $victim ]] || fail "no rank of the job found on $H1"
  sleep 2
  kill -9 "$victim"
  killed=$SECONDS
  timeout 60 tail --pid=$job -f /dev/null || fail "the job did not end 60 s after a rank was killed"
  wait $job && fail "the job survived a SIGKILLed rank"
  ((SECONDS - killed <= TMO + 10)) || fail "the job took $((SECONDS - killed)) s to end after the kill"
  say "a rank SIGKILLed on $H1: the job ended in $((SECONDS - killed)) s: ok"
  nothing_left "the killed rank"
  # 3. scancel mid-job: nothing left on any host.
  on "$H0" sbatch -N 2 --ntasks-per-node 2 -o "$WORK/job.out" \
    --wrap "srun $CLI bench -b 1M -e 1M -n 1000000 -w 0 -c 0" >"$WORK/out" 2>&1 || fail "sbatch"
  id=$(grep -oE '[0-9]+$' "$WORK/out")
  ranks_on() { local n=0; for pid in $(ip netns pids "$1"); do grep -qaF "$CLI" "/proc/$pid/cmdline" 2>/dev/null && n=$((n + 1)); done; echo $n; }
  for _ in $(seq 300); do
    [[ $(ranks_on "$H0") -ge 2 && $(ranks_on "$H1") -ge 2 ]] && break
    sleep 0.1
  done
  [[ $(ranks_on "$H0") -ge 2 && $(ranks_on "$H1") -ge 2 ]] || fail "the job's ranks did not start on both hosts in 30 s"
  sleep 1
  on "$H0" scancel "$id"
  nothing_left "scancel"
  say "scancel mid-job: nothing left on any host: ok"
  ;;

torch)
  [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import torch" 2>/dev/null || { echo "SKIP: no PyTorch"; exit 77; }
  PY=${MPCOMM_TEST_PYTHONPATH:?set MPCOMM_TEST_PYTHONPATH to the built python package}
  # torchrun on each host, two ranks each, init_process_group("mpcomm") and DDP across the hosts.
  on_each_host torch env PYTHONPATH="$PY" torchrun --nnodes 2 --node_rank "{k}" --nproc_per_node 2 --master_addr "$A0" \
    --master_port 29544 --redirects 1 --tee 1 "$HERE/../../examples/torch_ddp.py"
  cat "$WORK/torch0.out" "$WORK/torch1.out" >"$WORK/out"
  [[ $(grep -c "parameters equal to rank 0's: ok" "$WORK/out") -eq 4 ]] || { tail -20 "$WORK/out" >&2; fail "not every rank said ok"; }
  say "torchrun on 2 hosts × 2 ranks, DDP over mpcomm: ok"
  # srun starts the Python ranks itself: mpcomm.torch reads Slurm's variables (MASTER_ADDR = the step's
  # first node, MASTER_PORT from the job id).
  DEADLINE=200
  run "srun python3 torch_ddp.py" srun2 --ntasks-per-node 2 env PYTHONPATH="$PY" /usr/bin/python3 \
    "$HERE/../../examples/torch_ddp.py"
  [[ $(grep -c "parameters equal to rank 0's: ok" "$WORK/out") -eq 4 ]] || { tail -20 "$WORK/out" >&2; fail "srun: not every rank said ok"; }
  say "srun -N 2 --ntasks-per-node 2 python3 torch_ddp.py: ok"
  nothing_left torch
  ;;

launch)
  # Across hosts without Slurm the nodes share a secret: a token file only its owner can read.
  (umask 077 && head -c 24 /dev/urandom | base64 >"$WORK/job.secret")
  if on "$H0" "$CLI" launch --nnodes 2 --node-rank 0 --master "$A0:29555" -n 1 -- true >"$WORK/out" 2>&1; then
    fail "a network master without a secret was accepted"
  fi
  expect "needs a secret every node shares" "the refusal of a network master without a secret"
  chmod 644 "$WORK/job.secret"
  if on "$H0" "$CLI" launch --nnodes 2 --node-rank 0 --master "$A0:29555" --token-file "$WORK/job.secret" -n 1 -- \
    true >"$WORK/out" 2>&1; then fail "a token file of mode 0644 was accepted"; fi
  expect "its mode is 0644" "the refusal names the token file's mode"
  chmod 600 "$WORK/job.secret"
  say "no secret, or a token file others may read: refused before anything starts"
  # Under Slurm without a secret the launchers join node 0's store by MUNGE and hand its secret to their ranks.
  run "mpcomm launch --nnodes under srun (MUNGE)" srun2 --ntasks-per-node 1 bash -c \
    "exec $CLI launch --nnodes 2 --node-rank \$SLURM_NODEID --master $A0:29557 -n 1 --timeout 60 -- $CLI selftest --conformance"
  expect "backend native, 2 ranks" "the job of 2 launchers joined by MUNGE"
  expect " 0 failed" "conformance through launchers joined by MUNGE"
  say "mpcomm launch --nnodes 2 under srun, joined by MUNGE: conformance ok"
  # mpcomm launch on each host: node 0 serves the store at --master.
  on_each_host launch "$CLI" launch --nnodes 2 --node-rank "{k}" --master "$A0:29555" --token-file "$WORK/job.secret" \
    --nproc-per-node 2 --timeout 60 -- "$CLI" selftest --conformance
  cat "$WORK/launch0.out" >"$WORK/out"
  expect "backend native, 4 ranks" "the job of 2 nodes × 2 ranks"
  expect " 0 failed" "conformance through mpcomm launch --nnodes"
  say "mpcomm launch --nnodes 2 --nproc-per-node 2: conformance ok"
  # A failure on node 1 ends node 0's ranks (which would run for 100 s) within the grace period.
  on "$H0" "$CLI" launch --nnodes 2 --node-rank 0 --master "$A0:29556" --token-file "$WORK/job.secret" -n 1 --grace 2 \
    --timeout 60 -- sleep 100 >"$WORK/out" 2>&1 &
  n0=$!
  sleep 1
  timeout 60 "$MC" exec "$H1" -- "$CLI" launch --nnodes 2 --node-rank 1 --master "$A0:29556" \
    --token-file "$WORK/job.secret" -n 1 --timeout 60 -- \
    bash -c 'exit 3' >/dev/null 2>&1 && fail "node 1 succeeded"
  failed=$SECONDS
  timeout 30 tail --pid=$n0 -f /dev/null || fail "node 0 did not end 30 s after node 1 failed"
  wait $n0 && fail "node 0 succeeded after node 1 failed"
  ((SECONDS - failed <= 10)) || fail "node 0 took $((SECONDS - failed)) s to end after node 1 failed"
  expect "rank 1 exited with status 3" "node 0 names the rank that failed on node 1"
  say "a failure on node 1 ended node 0's ranks in $((SECONDS - failed)) s: ok"
  nothing_left launch
  ;;

elastic)
  # docs/reliability.md, section 7: 2 hosts × 2 ranks under mpcomm launch --nnodes 2 --elastic, running
  # tests/elastic/elastic_prog (checked allreduces; a survivor whose op fails shrinks and goes on).
  EP=${MPCOMM_TEST_ELASTIC_PROG:?set MPCOMM_TEST_ELASTIC_PROG to tests/mpcomm_elastic_prog}
  (umask 077 && head -c 24 /dev/urandom | base64 >"$WORK/job.secret")
  mkdir -p "$WORK/ep"
  elastic_job() {  # elastic_job PORT TIMEOUT_S VICTIMS ITERS: both nodes, in the background; node k's output in $WORK/el<k>.out
    local k
    for k in 0 1; do
      local h=$H0
      [[ $k -eq 1 ]] && h=$H1
      on "$h" "$CLI" launch --nnodes 2 --node-rank $k --master "$A0:$1" --token-file "$WORK/job.secret" \
        --nproc-per-node 2 --elastic --backend "$backend" --timeout "$2" -- "$EP" "$3" 20 "$4" "$WORK/ep" >"$WORK/el$k.out" 2>&1 &
      pids[k]=$!
    done
  }
  # 1. Rank 3 (host 1) SIGKILLs itself at iteration 20: the three others, on both hosts, shrink and go on; the
  #    time from the kill to their first good collective on the shrunk communicator, 3 runs per backend.
  port=29560
  for backend in native gloo; do
    times=""
    for run in 1 2 3; do
      rm -f "$WORK"/ep/*
      elastic_job $((port++)) 30 3 200
      for k in 0 1; do timeout 120 tail --pid="${pids[k]}" -f /dev/null || fail "$backend: node $k did not end"; done
      wait "${pids[0]}" || { tail -20 "$WORK/el0.out" >&2; fail "$backend: node 0's launcher failed"; }
      wait "${pids[1]}" || { tail -20 "$WORK/el1.out" >&2; fail "$backend: node 1's launcher failed"; }
      cat "$WORK/el0.out" "$WORK/el1.out" >"$WORK/out"
      [[ $(grep -c "200 allreduces right, 1 shrinks" "$WORK/out") -eq 3 ]] || { cat "$WORK/out" >&2; fail "$backend: not every survivor's sums right"; }
      expect "lost rank 3" "$backend: node 1 lists rank 3 lost"
      times+=" $(grep -o "shrunk to 3 ranks: first good collective [0-9.]* ms" "$WORK/out" | grep -o "[0-9.]* ms")"
    done
    say "$backend, 2 hosts × 2 ranks, rank 3 SIGKILLed: first good collective on the shrunk communicator after:$times"
  done
  nothing_left "the killed rank"
  # 2. Host 1's link cut mid-loop (--timeout 3): host 0's ranks see a timeout, agree without ranks 2 and 3 and go
  #    on by themselves; host 1's ranks fail (they lose the store). The link comes back once they have given up.
  backend=native
  rm -f "$WORK"/ep/*
  elastic_job $((port++)) 3 9 200000  # "9": no rank is killed; the cut's time goes to killed.9
  b1=$(tx_bytes "$H1")
  for _ in $(seq 300); do
    (($(tx_bytes "$H1") - b1 > 4 << 20)) && break
    sleep 0.1
  done
  ip link set "${NAME}v1" down
  date +%s%N >"$WORK/ep/killed.9"
  timeout 60 tail --pid="${pids[0]}" -f /dev/null || fail "node 0 did not end 60 s after the cut"
  ip link set "${NAME}v1" up
  timeout 60 tail --pid="${pids[1]}" -f /dev/null || fail "node 1 did not end 60 s after the cut"
  wait "${pids[0]}" || true  # node 0's launcher may say node 1 never reported
  wait "${pids[1]}" && fail "node 1's ranks went on without the store"
  cp "$WORK/el0.out" "$WORK/out"
  expect "shrunk to 2 ranks" "the cut: host 0's ranks shrink"
  [[ $(grep -c "200000 allreduces right, 1 shrinks" "$WORK/out") -eq 2 ]] || { cat "$WORK/out" >&2; fail "the cut: host 0's sums"; }
  took=$(grep -o "first good collective [0-9]*" "$WORK/out" | grep -o "[0-9]*$")
  # The op's timeout, then the agreement: ranks 2 and 3 are left out once their heartbeats stall (0.9 s), not
  # after a second timeout.
  ((took <= 5000)) || fail "the cut: host 0's first good collective came $took ms after the cut (timeout 3 s)"
  say "native, 2 hosts × 2 ranks, host 1's link cut (--timeout 3): $(grep -o "first good collective [0-9.]* ms after the kill ([a-z ]*)" "$WORK/out" | sed 's/the kill/the cut/')"
  nothing_left "the cut link"
  ;;

strangers)
  # docs/reliability.md, "Who gets in": under Slurm without MPCOMM_TOKEN the ranks join by MUNGE.
  command -v tcpdump >/dev/null || { echo "SKIP: tcpdump is missing (scripts/setup-deps installs it)"; exit 77; }
  PROG=${MPCOMM_TEST_PROG:?set MPCOMM_TEST_PROG to tests/errors/testprog}
  STRANGER=4242  # a uid nobody on this machine has: setpriv needs no account
  # 1. The job on hosts 0 and 1: each rank records its environment, then runs checked all-reduces across
  #    the hosts until this test is done with it (testprog hold). Rank 1's connections to host 0 are captured
  #    on host 0's interface.
  "$MC" exec "$H0" -- tcpdump -i eth0 -U -s 0 -c 400 -w "$WORK/wire.pcap" "tcp and src host $A1 and dst host $A0" \
    >"$WORK/tcpdump.log" 2>&1 &
  capture=$!
  for _ in $(seq 50); do grep -q "listening on" "$WORK/tcpdump.log" && break; sleep 0.1; done
  on "$H0" srun -N 2 -w "$H0,$H1" --ntasks-per-node 1 bash -c \
    "env >$WORK/env.\$SLURM_PROCID; exec $PROG hold $WORK/done" >"$WORK/job.out" 2>&1 &
  job=$!
  for _ in $(seq 300); do [[ -s $WORK/env.1 ]] && grep -q "wire.pcap\|listening" "$WORK/tcpdump.log" && break; sleep 0.1; done
  [[ -s $WORK/env.1 ]] || fail "the job's ranks did not start in 30 s"
  sleep 1  # the ranks have joined the store
  # 2. A process of another uid on host 2 with every variable of rank 1 starts mpcomm as that rank.
  mapfile -t E <"$WORK/env.1"
  started=$SECONDS
  if "$MC" exec "$H2" -- setpriv --reuid $STRANGER --regid $STRANGER --clear-groups env -i "${E[@]}" MPCOMM_TIMEOUT=30 \
    "$CLI" selftest -c 1 >"$WORK/stranger.out" 2>&1; then
    cat "$WORK/stranger.out" >&2; fail "the stranger of uid $STRANGER ran as a rank of the job"
  fi
  cp "$WORK/stranger.out" "$WORK/out"
  expect "refused this process: its MUNGE credential is of uid $STRANGER, not of the job's owner" "the stranger's error"
  ((SECONDS - started <= 10)) || fail "the stranger was refused only after $((SECONDS - started)) s"
  say "uid $STRANGER with the job's Slurm variables: refused at its first connection ($(grep -o 'refused this process.*' "$WORK/out" | head -1 | cut -c1-90))"
  # 3. Rank 1's store handshake, captured from the wire, sent again from host 2: refused.
  kill "$capture" 2>/dev/null || true
  wait "$capture" 2>/dev/null || true
  "$MC" exec "$H2" -- /usr/bin/python3 "$HERE/replay.py" "$WORK/wire.pcap" "$A0" >"$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "the replayed handshake was not refused"; }
  expect "refused:" "the replay's refusal"
  say "a store handshake captured from the wire and replayed: $(grep -o 'refused:.*' "$WORK/out" | cut -c1-100)"
  # 4. The job is unharmed: it ends well, every element right, and rank 0's store logged both refusals
  #    with the address they came from.
  touch "$WORK/done"
  timeout 60 tail --pid=$job -f /dev/null || fail "the job did not end 60 s after it was told to"
  cp "$WORK/job.out" "$WORK/out"
  wait $job || { tail -20 "$WORK/out" >&2; fail "the job failed"; }
  [[ $(grep -c "hold ok: rank [01]" "$WORK/out") -eq 2 ]] || { tail -20 "$WORK/out" >&2; fail "not both ranks ended with exact sums"; }
  [[ $(grep -c "connection from $A2:[0-9]*: refused" "$WORK/out") -ge 2 ]] || { grep refused "$WORK/out" >&2; fail "the store did not log two refusals from $A2"; }
  say "the job ended with exact results; its store logged: $(grep -o "connection from $A2:[0-9]*: refused.*" "$WORK/out" | head -1 | cut -c1-110)"
  # 5. Without munged, a job without MPCOMM_TOKEN fails at once saying what to do.
  started=$SECONDS
  if TMO=30 on "$H0" srun -N 1 -w "$H0" -n 2 env MPCOMM_MUNGE_SOCKET=/nonexistent/munge.socket "$CLI" selftest -c 1 \
    >"$WORK/out" 2>&1; then fail "a job ran without MUNGE and without MPCOMM_TOKEN"; fi
  expect "join by MUNGE" "the error without MUNGE"
  expect "MPCOMM_TOKEN" "the error without MUNGE names the way out"
  ((SECONDS - started <= 15)) || fail "the job without MUNGE took $((SECONDS - started)) s to fail"
  # ... and with MPCOMM_TOKEN it needs no MUNGE; a process with another secret is refused, the job unharmed.
  on "$H0" srun -N 2 -w "$H0,$H1" --ntasks-per-node 1 env MPCOMM_TOKEN=the-right-secret-0123 \
    MPCOMM_MUNGE_SOCKET=/nonexistent/munge.socket bash -c \
    "env >$WORK/tenv.\$SLURM_PROCID; exec $PROG hold $WORK/tdone" >"$WORK/job.out" 2>&1 &
  job=$!
  for _ in $(seq 300); do [[ -s $WORK/tenv.1 ]] && break; sleep 0.1; done
  [[ -s $WORK/tenv.1 ]] || fail "the job with MPCOMM_TOKEN did not start in 30 s"
  sleep 1
  mapfile -t E <"$WORK/tenv.1"
  if "$MC" exec "$H2" -- env -i "${E[@]}" MPCOMM_TOKEN=a-wrong-secret-0123 MPCOMM_TIMEOUT=30 "$CLI" selftest -c 1 \
    >"$WORK/out" 2>&1; then fail "a process with a wrong secret ran as a rank"; fi
  expect "does not know this job's secret" "the wrong secret's error"
  touch "$WORK/tdone"
  timeout 60 tail --pid=$job -f /dev/null || fail "the job with MPCOMM_TOKEN did not end 60 s after it was told to"
  cp "$WORK/job.out" "$WORK/out"
  wait $job || { tail -20 "$WORK/out" >&2; fail "the job with MPCOMM_TOKEN failed"; }
  [[ $(grep -c "hold ok: rank [01]" "$WORK/out") -eq 2 ]] || { tail -20 "$WORK/out" >&2; fail "not both ranks of the job with MPCOMM_TOKEN ended with exact sums"; }
  expect "connection from $A2:[0-9]*: refused: it does not prove this job's secret" "the store's log of the wrong secret"
  say "without munged: a clear error; with MPCOMM_TOKEN no MUNGE is needed and a wrong secret is refused"
  nothing_left strangers
  ;;

tls)
  # MPCOMM_TLS=1 (docs/reliability.md, "Encrypted links"): the link between the hosts carries no byte of
  # the data. Checked against the same run without TLS, whose capture must show the pattern.
  PROG=${MPCOMM_TEST_PROG:?set MPCOMM_TEST_PROG to tests/errors/testprog}
  command -v tcpdump >/dev/null || { echo "SKIP: tcpdump is missing (scripts/setup-deps installs it)"; exit 77; }
  for t in 0 1; do
    "$MC" exec "$H0" -- tcpdump -i eth0 -U -s 0 -c 50000 -w "$WORK/wire$t.pcap" "tcp and host $A1" \
      >"$WORK/tcpdump$t.log" 2>&1 &
    capture=$!
    for _ in $(seq 50); do grep -q "listening on" "$WORK/tcpdump$t.log" && break; sleep 0.1; done
    run "allreduce of a known pattern, MPCOMM_TLS=$t" srun2 --ntasks-per-node 1 env MPCOMM_TLS=$t "$PROG" pattern 1048576 2
    expect "pattern ok: rank 0 of 2, 2 allreduces of 1048576 floats" "the pattern's sums (MPCOMM_TLS=$t)"
    kill "$capture" 2>/dev/null || true
    wait "$capture" 2>/dev/null || true
    # Windows of 8 consecutive floats of the pattern (an input) and of twice it (a sum), at 43 places.
    found[t]=$(/usr/bin/python3 -c '
import struct, sys
data = open(sys.argv[1], "rb").read()
hits = 0
for k in range(0, 4088, 97):
    for scale in (1, 2):
        if struct.pack("<8f", *[scale * (1000.25 + (k + j) / 2) for j in range(8)]) in data:
            hits += 1
print(hits)' "$WORK/wire$t.pcap")
    say "MPCOMM_TLS=$t: $(stat -c %s "$WORK/wire$t.pcap") bytes captured, ${found[t]} pattern windows in them (86 looked for)"
  done
  ((found[0] > 0)) || fail "the capture without TLS does not show the pattern: the check cannot see anything"
  ((found[1] == 0)) || fail "with MPCOMM_TLS=1 the link carried ${found[1]} windows of the data in clear"
  say "MPCOMM_TLS=1: the data never crossed the link in clear (without TLS: ${found[0]} windows seen)"
  nothing_left tls
  ;;

*)
  fail "unknown step '$STEP'"
  ;;
esac
say "passed in $((SECONDS - T0)) s"
