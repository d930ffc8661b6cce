#!/usr/bin/env bash
# examples/torch_elastic.py under `mpcomm launch`, run twice by tests/torch/run.sh (which also checks that nothing
# is left behind): once whole, once under --elastic with rank 2 SIGKILLed at the start of step 3. Passes when the
# three survivors ran step 3 again on 3 ranks and every rank of both runs ends with the same parameters, bit for bit.
#
#   tests/torch/elastic_example.sh EXAMPLE        (the environment run.sh needs)
set -uo pipefail
here=$(dirname "$0")
example=$1
args=(--steps 8 --global 12)
fail=0
whole=$("$here/run.sh" mpcomm 4 "$example" "${args[@]}" 2>&1) || { printf '%s\n' "$whole"; echo "FAIL: the run without a failure failed"; exit 1; }
lost=$(MPCOMM_TEST_LAUNCH_ARGS=--elastic "$here/run.sh" --expect-ok 3 mpcomm 4 "$example" "${args[@]}" \
       --fail-rank 2 --fail-step 3 2>&1) || fail=1
printf '%s\n' "$lost" | grep -v '^\[[0-9]\] *\(#\|seq\|mpcomm flight\)'
digests() { grep -oE 'rank [0-9]+: OK .* sha256 [0-9a-f]{64}' | grep -oE '[0-9a-f]{64}$'; }
a=$(digests <<<"$whole" | sort | uniq -c) b=$(digests <<<"$lost" | sort | uniq -c)
echo "parameters without a failure: $a"
echo "parameters after losing rank 2: $b"
[[ $(wc -l <<<"$a") -eq 1 && "$a" =~ ^\ *4\  ]] || { echo "FAIL: the 4 ranks of the whole run disagree"; fail=1; }
[[ "${b##* }" == "${a##* }" && "$b" =~ ^\ *3\  ]] || { echo "FAIL: the survivors' parameters differ from the whole run's"; fail=1; }
again=$(grep -c 'shrunk from 4 to 3 ranks .* running step 3 again' <<<"$lost")
(( again == 3 )) || { echo "FAIL: $again survivors say they ran step 3 again on 3 ranks, not 3"; fail=1; }
grep -q 'lost rank 2; every other rank ended with 0' <<<"$lost" || { echo "FAIL: the launcher did not end with 0 listing rank 2"; fail=1; }
exit $fail
