#!/usr/bin/env bash
# Runs a PyTorch test script as N ranks of a job, and checks that the job left nothing behind.
#
#   tests/torch/run.sh [--expect-ok K] LAUNCHER N SCRIPT [ARGS...]
#
# LAUNCHER: torchrun (with --redirects 1 --tee 1, without which Debian's crashes on Python 3.11),
# mpcomm (`mpcomm launch`), mpirun. Needs MPCOMM_TEST_CLI (the mpcomm executable) and MPCOMM_TEST_PYTHONPATH (the
# built package: build/python for PyTorch 1.13, build/python-torch2 for 2.x) in the environment; runs
# MPCOMM_TEST_PYTHON, the interpreter with that torch (default /usr/bin/python3, Debian's 1.13).
# Passes when the job exits 0 and every rank says it passed — or, with --expect-ok K (a job where a rank is
# meant to fail), when at least K ranks say so — no rank says FAIL, and afterwards no process of this job
# and no shared-memory segment of mpcomm's remains.
set -uo pipefail
expect_ok=""
if [[ "${1:-}" == "--expect-ok" ]]; then expect_ok=$2; shift 2; fi
launcher=$1 n=$2 script=$3
shift 3
: "${MPCOMM_TEST_CLI:?set MPCOMM_TEST_CLI to the mpcomm executable}" "${MPCOMM_TEST_PYTHONPATH:?set MPCOMM_TEST_PYTHONPATH to build/python}"
py=${MPCOMM_TEST_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$MPCOMM_TEST_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
tag="mpcomm-torch-test-$$-$RANDOM"  # in every rank's argv: how leftovers are found
# The native backend names its segments /dev/shm/mpcomm.<MPCOMM_JOB_ID>.*: under torchrun and mpirun this
# job's own id; `mpcomm launch` sets an id of its own, so there any new segment counts (CTest runs those
# tests alone).
job_id=$(printf '%04x%04x%04x' $RANDOM $RANDOM $$)
export MPCOMM_JOB_ID=$job_id
shm_pattern="^mpcomm\\.$job_id\\."
[[ "$launcher" == mpcomm ]] && shm_pattern='^mpcomm\.'
shm_before=$(ls /dev/shm 2>/dev/null | grep -c "$shm_pattern" || true)

# A port nobody listens on now (torchrun takes no 0), so that tests may run side by side.
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

case "$launcher" in
  # MPCOMM_TEST_TORCHRUN_MONITOR=5: how often torchrun's agent looks at the ranks (1.13's default). 2.x's looks
  # every 0.1 s and ends the whole job as soon as one rank died, before the survivors can say how they saw it.
  torchrun) cmd=("$py" -m torch.distributed.run --redirects 1 --tee 1
                 ${MPCOMM_TEST_TORCHRUN_MONITOR:+--monitor_interval "$MPCOMM_TEST_TORCHRUN_MONITOR"} --nproc_per_node "$n"
                 --master_port "$(free_port)" "$script" "$@" --tag "$tag") ;;
  # MPCOMM_TEST_LAUNCH_ARGS: more options of mpcomm launch (--elastic).
  mpcomm)   cmd=("$MPCOMM_TEST_CLI" launch ${MPCOMM_TEST_LAUNCH_ARGS:-} -n "$n" --timeout 300 -- "$py" "$script" "$@"
                 --tag "$tag") ;;
  mpirun)   cmd=(mpirun -n "$n" --oversubscribe -x PYTHONPATH -x OMP_NUM_THREADS -x MPCOMM_JOB_ID)
            [[ $(id -u) -eq 0 ]] && cmd+=(--allow-run-as-root)
            cmd+=("$py" "$script" "$@" --tag "$tag") ;;
  *) echo "run.sh: unknown launcher '$launcher' (torchrun, mpcomm, mpirun)" >&2; exit 2 ;;
esac

out=$(timeout 600 "${cmd[@]}" 2>&1)
status=$?
printf '%s\n' "$out"
fail=0
# A rank that passed says "rank R: OK ..." or "rank R of N: ... 0 failed"; every rank must (so a job that
# ran nothing does not pass), or K of them with --expect-ok K, where the job's own status does not count.
# Counted per report, not per line: under mpirun two ranks' reports can reach one line.
oks=$(sed -E 's/rank [0-9]+(:| of)/\n&/g' <<<"$out" | grep -cE '^rank [0-9]+(: OK| of [0-9]+: .* 0 failed)' || true)
if (( oks < ${expect_ok:-$n} )); then echo "run.sh: $oks ranks passed, expected ${expect_ok:-$n}" >&2; fail=1; fi
if grep -qE 'rank [0-9]+: FAIL' <<<"$out"; then echo "run.sh: a rank failed" >&2; fail=1; fi
if [[ -z "$expect_ok" ]] && (( status != 0 )); then echo "run.sh: the job exited with status $status" >&2; fail=1; fi

# Nothing left: no process of this job (within 10 s), no new mpcomm segment.
for _ in $(seq 100); do pgrep -f "$tag" >/dev/null || break; sleep 0.1; done
if pgrep -f "$tag" >/dev/null; then
  echo "run.sh: processes of the job are left:" >&2; pgrep -af "$tag" >&2; pkill -9 -f "$tag"; fail=1
fi
shm_after=$(ls /dev/shm 2>/dev/null | grep -c "$shm_pattern" || true)
if (( shm_after > shm_before )); then
  echo "run.sh: shared-memory segments left: $(ls /dev/shm | grep "$shm_pattern")" >&2; fail=1
fi
exit $fail
