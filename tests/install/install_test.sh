#!/usr/bin/env bash
# Uses an installation as a user would: `cmake --install BUILD --prefix` into a fresh folder, then builds
# the installed examples against it four ways — find_package(mpcomm) with mpcomm::mpcomm and with
# mpcomm::mpcomm_static, pkg-config with mpcomm.pc and with mpcomm-static.pc — and runs every one under
# the installed `mpcomm launch -n 2` (and -n 4, gloo, mpi for some), checking that every rank says ok.
# Also: the package's version and components are honoured, each installed header compiles alone, errors
# and stores cross the library boundary, the README's example builds the README's way, the shared builds
# need libmpcomm.so (and start without LD_LIBRARY_PATH), the static ones do not.
#   install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mpcomm-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
unset LD_LIBRARY_PATH

step "install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/mpcomm include/mpcomm/mpcomm.h include/mpcomm/export.h lib/cmake/mpcomm/mpcomm-config.cmake \
         lib/cmake/mpcomm/mpcomm-config-version.cmake lib/pkgconfig/mpcomm.pc lib/pkgconfig/mpcomm-static.pc \
         lib/libmpcomm.a share/doc/mpcomm/README.md share/doc/mpcomm/examples/CMakeLists.txt; do
  [[ -e "$prefix/$f" ]] || fail "$f is not installed"
done
ls "$prefix"/lib/libmpcomm.so.* >/dev/null || fail "libmpcomm.so.* is not installed"
mpcomm=$prefix/bin/mpcomm
"$mpcomm" info >"$work/info.txt" || fail "the installed mpcomm info"
backends=$(awk '/^backends:/ { on = 1; next } /^[^ ]/ { on = 0 } on { print $1 }' "$work/info.txt" | sort | tr '\n' ' ')

step "the CMake package: version, components"
cat >"$work/probe.cmake" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(probe LANGUAGES CXX)
find_package(mpcomm ${WANT_VERSION} CONFIG REQUIRED COMPONENTS ${WANT_COMPONENTS})
message(STATUS "probe: version=${mpcomm_VERSION} backends=${mpcomm_BACKENDS} cuda=${mpcomm_HAVE_CUDA}")
EOF
probe() {  # probe VERSION "COMPONENTS..." -> configure output; status of the configure
  rm -rf "$work/probe" && mkdir -p "$work/probe" && cp "$work/probe.cmake" "$work/probe/CMakeLists.txt"
  cmake -S "$work/probe" -B "$work/probe/build" -DCMAKE_PREFIX_PATH="$prefix" -DWANT_VERSION="$1" \
        -DWANT_COMPONENTS="$2" 2>&1
}
out=$(probe 0.1 "native;static") || { echo "$out"; fail "find_package(mpcomm 0.1 COMPONENTS native static)"; }
grep -q "probe: version=0.1" <<<"$out" || { echo "$out"; fail "mpcomm_VERSION"; }
pkg_backends=$(sed -n 's/.*probe: version=[^ ]* backends=\([^ ]*\) .*/\1/p' <<<"$out")
[[ "$(tr ';' '\n' <<<"$pkg_backends" | sort | tr '\n' ' ')" == "$backends" ]] ||
  fail "mpcomm_BACKENDS ($pkg_backends) is not what mpcomm info lists ($backends)"
for b in $(tr ';' ' ' <<<"$pkg_backends"); do
  probe 0.1 "$b" >/dev/null || fail "component $b listed in mpcomm_BACKENDS but not found"
done
out=$(probe 0.2 "") && fail "find_package(mpcomm 0.2) accepted version 0.1"
out=$(probe 0.1 "no_such_backend") && fail "a missing REQUIRED component was accepted"
grep -q "component no_such_backend is not in this installation" <<<"$out" || { echo "$out"; fail "missing-component message"; }

examples=$prefix/share/doc/mpcomm/examples
step "build the examples with find_package(mpcomm): shared and static"
cmake -S "$examples" -B "$work/cmake-shared" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-shared" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "CMake build, shared"; }
cmake -S "$examples" -B "$work/cmake-static" -DCMAKE_PREFIX_PATH="$prefix" -DMPCOMM_EXAMPLES_STATIC=ON >/dev/null
cmake --build "$work/cmake-static" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "CMake build, static"; }

step "build the examples with pkg-config: mpcomm.pc and mpcomm-static.pc"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[[ $(pkg-config --modversion mpcomm) == $(sed -n 's/.*probe: version=\([^ ]*\).*/\1/p' <<<"$(probe 0.1 "")") ]] ||
  fail "pkg-config and CMake disagree on the version"
for kind in shared static; do
  cp -r "$examples" "$work/pc-$kind"
  make -C "$work/pc-$kind" -j2 STATIC=$([[ $kind == static ]] && echo 1 || echo 0) >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; fail "pkg-config build, $kind"; }
done

step "the installed headers: each compiles alone (C++17); errors and stores cross the library boundary"
for h in "$prefix"/include/mpcomm/*.h; do
  echo "#include <mpcomm/$(basename "$h")>" | g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only \
    $(pkg-config --cflags mpcomm) -x c++ - || fail "mpcomm/$(basename "$h") does not compile alone"
done
cat >"$work/api.cc" <<'END'
#include <mpcomm/mpcomm.h>

#include <cstdio>
#include <memory>

// A store of the program's own, handed to the library (the vtable and typeinfo of mpcomm::Store).
struct CountingStore : mpcomm::HashStore {
  int sets = 0;
  void set(const std::string& key, const mpcomm::Bytes& value) override {
    ++sets;
    HashStore::set(key, value);
  }
};

int main() {
  try {
    mpcomm::parse_dtype("no_such_type");
    return 1;
  } catch (const mpcomm::InvalidArgument& e) {  // thrown inside libmpcomm.so, caught here by its type
    std::printf("caught: %s\n", e.what());
  }
  auto store = std::make_shared<CountingStore>();
  auto comm = mpcomm::create("native", store, 0, 1);
  int x = 41, y = 0;
  comm->allreduce(&x, &y, 1, mpcomm::DataType::int32, mpcomm::ReduceOp::sum);
  try {
    comm->broadcast(&x, 1, mpcomm::DataType::int32, /*root=*/5);
    return 1;
  } catch (const mpcomm::Error& e) {
    if (e.code() != mpcomm::ErrorCode::invalid_argument) return 1;
  }
  const bool ok = y == 41 && store->sets > 0;
  std::printf("api: allreduce %d, %d set calls on the program's store: %s\n", y, store->sets, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
END
g++ -std=c++17 -Wall -Wextra -Werror -o "$work/api" "$work/api.cc" $(pkg-config --cflags --libs mpcomm) || fail "api.cc"
"$work/api" >"$work/api.txt" || { cat "$work/api.txt"; fail "api"; }
grep -q ": ok$" "$work/api.txt" || { cat "$work/api.txt"; fail "api"; }
tail -1 "$work/api.txt"

step "the README's example, built as the README says"
awk '/^## Using the API/ { on = 1 } on && /^```cpp/ { code = 1; next } code && /^```/ { exit } code { print }' \
  "$prefix/share/doc/mpcomm/README.md" >"$work/app.cc"
[[ -s "$work/app.cc" ]] || fail "no C++ example under 'Using the API' in README.md"
g++ "$work/app.cc" -o "$work/app" $(pkg-config --cflags --libs mpcomm) || fail "the README's example does not build"
(cd "$work" && timeout 300 "$prefix/bin/mpcomm" launch -n 4 -- ./app >/dev/null) || fail "the README's example under launch -n 4"
unset PKG_CONFIG_PATH

step "linkage"
for dir in cmake-shared pc-shared; do
  grep -q 'NEEDED.*libmpcomm\.so' <<<"$(readelf -d "$work/$dir/hello_allreduce")" || fail "$dir/hello_allreduce does not use libmpcomm.so"
done
for dir in cmake-static pc-static; do
  grep -q 'NEEDED.*libmpcomm\.so' <<<"$(readelf -d "$work/$dir/hello_allreduce")" && fail "$dir/hello_allreduce uses libmpcomm.so"
done

# run N EXPECTED_LINES PROGRAM [launch options...]: every rank prints one line ending in ": ok".
run() {
  local n=$1 program=$2; shift 2
  local out
  out=$(cd "$work" && timeout 300 "$mpcomm" launch -n "$n" "$@" -- "$program" 2>&1) ||
    { echo "$out"; fail "mpcomm launch -n $n $* -- $program"; }
  local oks
  oks=$(grep -cE ': ok$' <<<"$out" || true)
  [[ "$oks" -eq "$n" ]] || { echo "$out"; fail "$program -n $n $*: $oks of $n ranks said ok"; }
  grep -m1 -E ': ok$' <<<"$out"
}

step "run under the installed mpcomm launch"
for dir in cmake-shared cmake-static pc-shared pc-static; do
  for example in hello_allreduce tp_linear pipeline overlap; do
    run 2 "$work/$dir/$example"
  done
done
for example in hello_allreduce tp_linear pipeline overlap; do
  run 4 "$work/cmake-shared/$example"
done
for b in gloo mpi; do
  if [[ " $backends " == *" $b "* ]]; then
    run 2 "$work/pc-shared/hello_allreduce" --backend "$b"
    run 4 "$work/cmake-shared/tp_linear" --backend "$b"
  fi
done
if [[ -d "$build/python/mpcomm" ]]; then
  step "the python package: torch.distributed's \"mpcomm\" backend from the installed copy"
  site=$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -1)
  [[ -n "$site" && -f "$site/mpcomm/torch.py" ]] || fail "the python package is not installed under $prefix/lib/python3*/dist-packages"
  ls "$site"/mpcomm/_C*.so >/dev/null || fail "the extension mpcomm._C is not installed"
  [[ -f "$prefix/share/doc/mpcomm/examples/torch_ddp.py" ]] || fail "examples/torch_ddp.py is not installed"
  # The installed copy only: the build folder is nowhere on any path; the extension finds the installed
  # libmpcomm.so by its RUNPATH.
  out=$(cd "$work" && PYTHONPATH="$site" OMP_NUM_THREADS=1 timeout 300 "$mpcomm" launch -n 2 -- /usr/bin/python3 \
        "$prefix/share/doc/mpcomm/examples/torch_ddp.py" 2>&1) || { echo "$out"; fail "torch_ddp.py under mpcomm launch"; }
  [[ $(grep -c ': ok$' <<<"$out") -eq 2 ]] || { echo "$out"; fail "torch_ddp.py: not every rank said ok"; }
  grep -m1 ': ok$' <<<"$out"
  lib=$(cd "$work" && PYTHONPATH="$site" /usr/bin/python3 -c 'import mpcomm._C as c; print(c.__file__)')
  deps=$(ldd "$lib")  # (not piped into grep -q: under pipefail ldd's SIGPIPE would fail the check)
  grep -q "$prefix/lib.*/libmpcomm.so" <<<"$deps" || { echo "$deps"; fail "the extension does not load the installed libmpcomm.so"; }
fi
echo "ok: installed, examples built 4 ways and run (backends here: $backends)"
