// mpcomm/export.h — what libmpcomm.so exports.
//
// The library is compiled with hidden visibility: only what these public headers mark MPCOMM_API (their
// classes and functions) is visible to the programs that link it. MPCOMM_HIDDEN keeps a member of an
// exported class inside (private Impl structs, a constructor only the library calls), which would
// otherwise be exported with their class.
// cmake/mpcomm.map also keeps std:: instantiations and third-party symbols out of the dynamic symbol table.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define MPCOMM_API __attribute__((visibility("default")))
#define MPCOMM_HIDDEN __attribute__((visibility("hidden")))
#else
#define MPCOMM_API
#define MPCOMM_HIDDEN
#endif
