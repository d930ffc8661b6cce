#!/usr/bin/env bash
# The package as a user installs it: a fresh virtual environment, `pip install --no-build-isolation` of this
# source tree (the default build: libmpcomm compiled into the package), then a torchrun job there, from a folder
# outside the source tree and without PYTHONPATH: tests/torch/ops2_check.py at 2 ranks and FSDP2 at 4.
#   install_check.sh TORCH2_PYTHON SOURCE_DIR
# The fresh environment sees the torch of TORCH2_PYTHON's environment through a .pth file (torch is the user's
# own install, several GB: not made again per test); everything of mpcomm comes from the install.
set -uo pipefail
py=$1 src=$2
work=$(mktemp -d /tmp/mpcomm-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "install_check: FAIL: $*" >&2; exit 1; }

base=$("$py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$work/venv" || fail "python -m venv"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mysite=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$mysite/torch-env.pth"
"$work/venv/bin/python" -c 'import mpcomm' 2>/dev/null && fail "mpcomm is importable before the install"

echo "install_check: pip install --no-build-isolation $src"
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$work/venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps "$src" > "$work/pip.log" 2>&1 || { tail -30 "$work/pip.log"; fail "pip install"; }
where=$(cd "$work" && "$work/venv/bin/python" -c 'import mpcomm.torch, os; print(os.path.dirname(mpcomm.__file__))') ||
  fail "import mpcomm.torch after the install"
[[ "$where" == "$mysite/mpcomm" ]] || fail "mpcomm imported from $where, not from the environment ($mysite/mpcomm)"
[[ -f "$where/libmpcomm.so" ]] || fail "libmpcomm.so is not inside the installed package"
# Read whole before it is searched: under pipefail, `ldd | grep -q` fails when grep leaves at its match while the
# loader is still writing lines (SIGPIPE).
deps=$(ldd "$where"/_C*.so) || fail "ldd of the extension: $deps"
grep -qF "libmpcomm.so => $where/libmpcomm.so" <<<"$deps" ||
  { echo "$deps" >&2; fail "the extension does not load the package's libmpcomm.so"; }

cp "$src/tests/torch/ops2_check.py" "$src/tests/torch/workloads2_check.py" "$work/"
cd "$work"
for job in "2 ops2_check.py" "4 workloads2_check.py fsdp"; do
  read -r n script args <<<"$job"
  out=$(env -u PYTHONPATH OMP_NUM_THREADS=1 timeout 300 "$work/venv/bin/python" -m torch.distributed.run --nproc_per_node "$n" \
        --master_port "$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
        "$script" $args 2>&1)
  # Counted per report: two ranks' reports can reach one line.
  oks=$(sed -E 's/rank [0-9]+ of/\n&/g' <<<"$out" | grep -cE '^rank [0-9]+ of [0-9]+: .* 0 failed')
  if (( oks != n )); then tail -30 <<<"$out"; fail "torchrun $script $args in the fresh environment: $oks of $n ranks passed"; fi
  echo "install_check: torchrun -n $n $script $args in the fresh environment: every rank passed"
done
