#!/usr/bin/env bash
# A package built for one PyTorch, imported under another, refuses at `import mpcomm.torch` with an ImportError
# that names both versions (before the extension is loaded), both ways:
#   version_mismatch.sh PYTHON_A PACKAGE_FOR_B PYTHON_B PACKAGE_FOR_A
set -uo pipefail
fail=0
try() {  # PYTHON PACKAGE_DIR
  local py=$1 pkg=$2 running built out
  running=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
  built=$(PYTHONPATH=$pkg "$py" -c 'from mpcomm import _build_info; print(_build_info.TORCH_VERSION)')
  out=$(PYTHONPATH=$pkg "$py" -c 'import mpcomm.torch' 2>&1)
  if [[ $? -eq 0 ]]; then
    echo "FAIL: the package built for torch $built imported under torch $running" >&2; fail=1
  elif ! grep -q "ImportError: mpcomm: this mpcomm package was built for torch $built, but the torch imported is $running" <<<"$out"; then
    echo "FAIL: importing the package built for torch $built under torch $running did not say so:" >&2
    tail -3 <<<"$out" >&2; fail=1
  else
    echo "ok: built for $built, refused under $running"
  fi
}
try "$1" "$2"
try "$3" "$4"
exit $fail
