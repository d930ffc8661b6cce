#!/bin/bash
# mpcomm plan from the command line: a plan of GPT-3 175B on 1,024 H100s (its JSON: splits that fit, sorted,
# each within a GPU's memory), a prediction, calibration and validation from bench rows (a real 2-rank sweep
# measured here: the fitted profile is written and predicts the rows it was fitted to), and bad input refused
# with an error naming what is wrong.
#   plan_cli_test.sh BUILD_DIR
set -u
mpcomm=$1/mpcomm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MPCOMM_PROFILE_DIR=$work
fail=0
bad() { echo "plan_cli_test: FAIL: $*" >&2; fail=1; }

out=$("$mpcomm" plan --model gpt3-175b --gpus 1024 --gpus-per-node 8 --profile dgx-h100-ndr400 --global-batch 1536 \
      --json "$work/plan.json" 2>&1) || bad "the GPT-3 plan failed: $out"
grep -q "wins over" <<<"$out" || bad "the plan does not say why the best wins: $out"
python3 - "$work/plan.json" <<'PY' || bad "the plan's JSON"
import json, sys
p = json.load(open(sys.argv[1]))
ranked = p["ranked"]
assert ranked, "no split fits"
assert all(r["tp"] * r["pp"] * r["dp"] == 1024 for r in ranked)
assert [r["step_s"] for r in ranked] == sorted(r["step_s"] for r in ranked), "not sorted by step time"
for r in ranked:
    mem = r["weights_bytes"] + r["grads_bytes"] + r["optimizer_bytes"] + r["activation_bytes"]
    assert mem <= 0.9 * 80e9, r
assert any("GB a GPU" in r["why_not"] for r in p["rejected"]), "no split rejected for memory"
PY

out=$("$mpcomm" plan --predict allreduce --bytes 8G --ranks 8 --hosts 1 --profile dgx-a100-ib200 2>&1)
grep -qE "busbw 2[0-9]{2}\.[0-9]+ GB/s" <<<"$out" || bad "8 A100s' 8 GiB all-reduce: $out"

# Calibration from a bench sweep of 2 and 3 ranks (two rank counts, many sizes), then validation on it.
for n in 2 3; do
  "$mpcomm" bench --ranks $n --ops allreduce,sendrecv -b 4K -e 4M -f 4 -n 5 -w 2 --json "$work/rows$n.json" \
    > /dev/null 2>&1 || bad "bench --ranks $n"
done
# And two sweeps after compute (each call from ~2 and ~6 ms of it): the profile gets each op's cold costs within a
# host, one line per sweep, and validation reports those rows apart.
for us in 2000 6000; do
  "$mpcomm" bench --ranks 2 --ops allreduce,sendrecv -b 16K -e 1M -f 4 -n 5 -w 1 --compute-us $us \
    --json "$work/cold$us.json" > /dev/null 2>&1 || bad "bench --compute-us $us"
done
rows=("$work/rows2.json" "$work/rows3.json" "$work/cold2000.json" "$work/cold6000.json")
out=$("$mpcomm" plan --calibrate --from "${rows[@]}" 2>&1) || bad "calibrate: $out"
grep -q "^op native allreduce" "$work/this-machine.profile" || bad "no allreduce constants in the profile"
for op in allreduce sendrecv; do
  n=$(grep -c "^cold native $op across_hosts=0 wait_us=" "$work/this-machine.profile")
  [ "$n" = 2 ] || bad "$n cold lines for $op within a host, not 2: $(cat "$work/this-machine.profile")"
done
out=$("$mpcomm" plan --validate --from "${rows[@]}" 2>&1) || bad "validate: $out"
grep -qE "^profile this-machine over [0-9]+ rows: median \|error\|" <<<"$out" || bad "validate's summary: $out"
grep -qE "^\(all ops\) after compute +[0-9]+ rows" <<<"$out" || bad "validate: no summary of the rows after compute: $out"
out=$("$mpcomm" train -n 2 --tp 2 --steps 3 2>&1) || bad "train: $out"
grep -qE "cost model's transfer time.*a call's wait for its last rank [0-9.]+ /" <<<"$out" ||
  bad "train prints no prediction with the ranks' wait: $out"

refused() {  # refused "WHAT IT MUST SAY" ARGS...
  local want=$1
  shift
  local o
  if o=$("$mpcomm" plan "$@" 2>&1); then bad "accepted: plan $*"; return; fi
  grep -qF -- "$want" <<<"$o" || bad "plan $*: the error does not say '$want': $o"
}
refused "unknown model 'gpt9'" --model gpt9 --gpus 8 --global-batch 8 --profile dgx-a100-ib200
refused "unknown profile 'dgx-z100'" --model gpt2 --gpus 8 --global-batch 8 --profile dgx-z100
refused "--gpus-per-node 16 is more than --gpus 8" --model gpt2 --gpus 8 --gpus-per-node 16 --global-batch 8 \
  --profile dgx-a100-ib200
refused "not a multiple of heads" --layers 4 --hidden 100 --heads 3 --seq 64 --vocab 100 --gpus 8 --global-batch 8 \
  --profile dgx-a100-ib200
printf 'mpcomm-profile 1\nname = p\nranks_per_host = 8\nflops = 1e15\nmemory_gb = 80\nbackend nccl overhead_us=1 intra_alpha_us=1 intra_bw_gbs=1 inter_alpha_us=1\n' \
  > "$work/bad.profile"
refused "missing field inter_bw_gbs" --model gpt2 --gpus 8 --global-batch 8 --profile "$work/bad.profile"
refused "unknown op 'allshuffle'" --predict allshuffle --profile dgx-a100-ib200
refused "nothing fits" --model gpt3-175b --gpus 8 --global-batch 8 --profile dgx-a100-ib200
exit $fail
