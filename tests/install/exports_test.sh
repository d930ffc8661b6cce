#!/usr/bin/env bash
# libmpcomm.so exports the public API and nothing else: every defined dynamic symbol demangles into the
# mpcomm namespace (a function, or the typeinfo / vtable of a class) and belongs to a class or function
# that include/mpcomm marks MPCOMM_API; none of mpcomm's internals (detail::, native::, the Impl structs,
# ...), no std:: instantiation, no third-party symbol. Also checks the SONAME and that the API a program
# needs is there.
#   exports_test.sh LIBRARY EXPECTED_SONAME INCLUDE_DIR
set -euo pipefail
lib=$1
soname=$2
include=$3

symbols=$(nm -D --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }' | c++filt)
[[ -n "$symbols" ]] || { echo "FAIL: $lib exports nothing"; exit 1; }

outside=$(grep -vE '^(mpcomm::|typeinfo for mpcomm::|typeinfo name for mpcomm::|vtable for mpcomm::)' <<<"$symbols" || true)
if [[ -n "$outside" ]]; then
  echo "FAIL: symbols outside namespace mpcomm:"; echo "$outside"; exit 1
fi
# The public names: classes and functions the headers mark MPCOMM_API.
public=$( (grep -ohE '(class|struct) MPCOMM_API [A-Za-z_]+' "$include"/mpcomm/*.h | awk '{ print $3 }'
           grep -hE '^ *(\[\[noreturn\]\] )?MPCOMM_API ' "$include"/mpcomm/*.h | grep -v -E '(class|struct) MPCOMM_API' |
             sed -E 's/\(.*//; s/.*[ *&:]([A-Za-z_][A-Za-z_0-9]*)$/\1/') | sort -u)
[[ $(wc -l <<<"$public") -gt 10 ]] || { echo "FAIL: found no MPCOMM_API names in $include/mpcomm"; exit 1; }
# The name each symbol belongs to: mpcomm::NAME, mpcomm::NAME::member, typeinfo for mpcomm::NAME, ...
# (mpcomm::trace::NAME for the timeline's namespace).
unlisted=$(sed -E 's/^(typeinfo name for|typeinfo for|vtable for) //; s/\(.*//; s/\[abi:[a-z0-9]+\]//g' <<<"$symbols" |
           awk -F'::' '{ print ($2 == "trace" ? $3 : $2) }' | sort -u | grep -vxF -f <(echo "$public") || true)
if [[ -n "$unlisted" ]]; then
  echo "FAIL: exported names that include/mpcomm does not mark MPCOMM_API:"; echo "$unlisted"; exit 1
fi
internal=$(sed -E 's/\(.*//' <<<"$symbols" | grep -E '::(Impl|State)::' || true)
if [[ -n "$internal" ]]; then
  echo "FAIL: private Impl structs of exported classes are exported:"; echo "$internal"; exit 1
fi
# Nor a member that takes or returns an internal type (e.g. Communicator's constructor from a detail::FrontDoor).
internal=$(grep -F 'mpcomm::detail::' <<<"$symbols" || true)
if [[ -n "$internal" ]]; then
  echo "FAIL: exported symbols that use mpcomm::detail:"; echo "$internal"; exit 1
fi

for needed in 'mpcomm::init_from_env(' 'mpcomm::create(' 'mpcomm::Communicator::allreduce(' \
              'mpcomm::Communicator::iallreduce(' 'mpcomm::Request::wait()' 'mpcomm::TcpStore::TcpStore(' \
              'mpcomm::available_backends' 'mpcomm::parse_dtype(' 'typeinfo for mpcomm::Error' \
              'typeinfo for mpcomm::Timeout' 'typeinfo for mpcomm::Store' 'mpcomm::trace::write('; do
  grep -qF "$needed" <<<"$symbols" || { echo "FAIL: $needed is not exported"; exit 1; }
done

actual=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$actual" == "$soname" ]] || { echo "FAIL: SONAME is '$actual', expected '$soname'"; exit 1; }

echo "ok: $(wc -l <<<"$symbols") symbols exported, all in namespace mpcomm; SONAME $actual"
