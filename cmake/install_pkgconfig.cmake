# Run by `cmake --install` (install(CODE) in cmake/install.cmake sets the MPCOMM_* variables): writes
# mpcomm.pc and mpcomm-static.pc for the prefix being installed to, and installs them.
#   pkg-config --cflags --libs mpcomm          libmpcomm.so (its dependencies are its own NEEDED entries)
#   pkg-config --cflags --libs mpcomm-static   libmpcomm.a and every library it needs
# `pkg-config --static mpcomm` adds the same libraries to the first (Libs.private), as pkg-config expects.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(_libdir "${prefix}/${MPCOMM_LIBDIR}")
# Outside the folders the linker and the loader search by themselves, the program records where
# libmpcomm.so is (RUNPATH): `mpcomm launch -- ./app` then works without LD_LIBRARY_PATH.
set(_rpath "")
list(FIND MPCOMM_SYSTEM_LIB_DIRS "${_libdir}" _system)  # (no IN_LIST: install scripts run without policies)
if(_system EQUAL -1)
  set(_rpath " -Wl,-rpath,\${libdir}")
endif()
string(REPLACE ";" "," MPCOMM_BACKENDS_PC "${MPCOMM_BACKENDS}")
# One staging folder per destination, so that two installs from one build do not write the same file.
string(MD5 _dest "$ENV{DESTDIR}${prefix}")
set(_stage "${MPCOMM_PC_STAGE}/${_dest}")

set(MPCOMM_PC_NAME mpcomm)
set(MPCOMM_PC_DESCRIPTION "mpcomm collective communication, shared library (backends ${MPCOMM_BACKENDS_PC})")
set(MPCOMM_PC_LIBS "-L\${libdir}${_rpath} -lmpcomm")
set(MPCOMM_PC_LIBS_PRIVATE "${MPCOMM_PC_DEPS}")
configure_file("${MPCOMM_PC_TEMPLATE}" "${_stage}/mpcomm.pc" @ONLY)

set(MPCOMM_PC_NAME mpcomm-static)
set(MPCOMM_PC_DESCRIPTION "mpcomm collective communication, static library (backends ${MPCOMM_BACKENDS_PC})")
set(MPCOMM_PC_LIBS "\${libdir}/libmpcomm.a ${MPCOMM_PC_DEPS}")
set(MPCOMM_PC_LIBS_PRIVATE "")
configure_file("${MPCOMM_PC_TEMPLATE}" "${_stage}/mpcomm-static.pc" @ONLY)

file(INSTALL "${_stage}/mpcomm.pc" "${_stage}/mpcomm-static.pc" DESTINATION "${_libdir}/pkgconfig")  # (file(INSTALL) adds DESTDIR)
