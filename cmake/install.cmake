# Installation (`cmake --install build --prefix P`, `make install`) and packaging (`make deb`: CPack).
# Included at the end of the top CMakeLists.txt, once every target and backend is known. What goes where:
#   bin/mpcomm                        the CLI (libmpcomm linked in), with plot_report.py, plot_timeline.py and torch-bench beside
#                                     it (`mpcomm compare --report`, `--torch` run them from there)
#   include/mpcomm/*.h                the public headers
#   LIBDIR/libmpcomm.so.X.Y           the shared library (SONAME libmpcomm.so.X.Y), libmpcomm.so, libmpcomm.a
#   LIBDIR/cmake/mpcomm/              find_package(mpcomm): mpcomm::mpcomm, mpcomm::mpcomm_static
#   LIBDIR/pkgconfig/                 mpcomm.pc (shared), mpcomm-static.pc
#   share/doc/mpcomm/                 README.md, docs/*.md, examples/
#   lib/python3.X/dist-packages/mpcomm  the PyTorch backend's package (cmake/torch.cmake; /usr: lib/python3/dist-packages)
# docs/install.md says how to use each.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- what this build has: read from the library's own definitions, so it cannot drift from them -------
get_target_property(_mpcomm_defs mpcomm INTERFACE_COMPILE_DEFINITIONS)
set(MPCOMM_BUILT_BACKENDS native)
foreach(_b gloo mpi nccl)
  string(TOUPPER ${_b} _B)
  if("MPCOMM_HAVE_${_B}=1" IN_LIST _mpcomm_defs)
    list(APPEND MPCOMM_BUILT_BACKENDS ${_b})
  endif()
endforeach()
list(APPEND MPCOMM_BUILT_BACKENDS auto)  # made of the others: in every build
set(MPCOMM_BUILT_CUDA OFF)
if("MPCOMM_HAVE_CUDA=1" IN_LIST _mpcomm_defs)
  set(MPCOMM_BUILT_CUDA ON)
endif()

# The libraries a program linking libmpcomm.a must link too, as absolute paths (libmpcomm.so records them
# itself). The same list feeds mpcomm::mpcomm_static and the pkg-config files; tests/install links the
# examples statically with both, so a dependency missing here fails there.
set(MPCOMM_LINK_DEPS)
if("gloo" IN_LIST MPCOMM_BUILT_BACKENDS)
  get_target_property(_gloo_lib gloo LOCATION)
  list(APPEND MPCOMM_LINK_DEPS ${_gloo_lib})
endif()
if("mpi" IN_LIST MPCOMM_BUILT_BACKENDS)
  list(APPEND MPCOMM_LINK_DEPS ${MPI_C_LIBRARIES})
endif()
# Directories of libraries outside the system's: the CUDA runtime and NCCL in /usr/local/cuda. They go into
# the RUNPATH of libmpcomm.so and of the CLI, so both start wherever the loader was not told about CUDA.
set(MPCOMM_EXTRA_LIB_DIRS)
if(MPCOMM_BUILT_CUDA)
  list(APPEND MPCOMM_LINK_DEPS ${CUDA_cudart_LIBRARY})
  get_filename_component(_dir ${CUDA_cudart_LIBRARY} DIRECTORY)
  list(APPEND MPCOMM_EXTRA_LIB_DIRS ${_dir})
  if("nccl" IN_LIST MPCOMM_BUILT_BACKENDS)
    list(APPEND MPCOMM_LINK_DEPS ${NCCL_LIBRARY})
    get_filename_component(_dir ${NCCL_LIBRARY} DIRECTORY)
    list(APPEND MPCOMM_EXTRA_LIB_DIRS ${_dir})
  endif()
  list(REMOVE_DUPLICATES MPCOMM_EXTRA_LIB_DIRS)
  list(REMOVE_ITEM MPCOMM_EXTRA_LIB_DIRS ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES})
endif()
list(APPEND MPCOMM_LINK_DEPS ${OPENSSL_SSL_LIBRARY} ${OPENSSL_CRYPTO_LIBRARY})
foreach(_l IN LISTS CMAKE_DL_LIBS)
  list(APPEND MPCOMM_LINK_DEPS -l${_l})
endforeach()
list(APPEND MPCOMM_LINK_DEPS -pthread -lrt)
# A program linking libmpcomm.a through pkg-config records those directories too (CMake does it by itself).
set(MPCOMM_PC_DEPS ${MPCOMM_LINK_DEPS})
foreach(_dir IN LISTS MPCOMM_EXTRA_LIB_DIRS)
  list(APPEND MPCOMM_PC_DEPS -Wl,-rpath,${_dir})
endforeach()
string(REPLACE ";" " " MPCOMM_PC_DEPS "${MPCOMM_PC_DEPS}")
set_target_properties(mpcomm_shared mpcomm_cli PROPERTIES INSTALL_RPATH "${MPCOMM_EXTRA_LIB_DIRS}")

# ---- files ----------------------------------------------------------------------------------------
set(MPCOMM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpcomm)
install(TARGETS mpcomm_shared EXPORT mpcomm-targets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mpcomm ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mpcomm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_BINARY_DIR}/plot_report.py ${CMAKE_BINARY_DIR}/plot_timeline.py DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${CMAKE_BINARY_DIR}/torch-bench DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/mpcomm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# ---- the CMake package -----------------------------------------------------------------------------
install(EXPORT mpcomm-targets NAMESPACE mpcomm:: DESTINATION ${MPCOMM_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mpcomm-config.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/mpcomm-config.cmake INSTALL_DESTINATION ${MPCOMM_CMAKE_DIR})
# 0.x releases may break the API at every minor version; from 1.0 on, at every major one.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_compat SameMinorVersion)
else()
  set(_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/mpcomm-config-version.cmake COMPATIBILITY ${_compat})
install(FILES ${CMAKE_BINARY_DIR}/cmake/mpcomm-config.cmake ${CMAKE_BINARY_DIR}/cmake/mpcomm-config-version.cmake
        DESTINATION ${MPCOMM_CMAKE_DIR})

# ---- pkg-config: written at install time, when the prefix is known (`--prefix` may change it) ---------
# A prefix whose library folder the linker does not search by itself also gets -Wl,-rpath, so a program
# built with `pkg-config --libs mpcomm` finds libmpcomm.so when it runs.
install(CODE "
  set(MPCOMM_PC_TEMPLATE \"${CMAKE_SOURCE_DIR}/cmake/mpcomm.pc.in\")
  set(MPCOMM_PC_STAGE \"${CMAKE_BINARY_DIR}/pkgconfig\")
  set(MPCOMM_VERSION \"${PROJECT_VERSION}\")
  set(MPCOMM_BACKENDS \"${MPCOMM_BUILT_BACKENDS}\")
  set(MPCOMM_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(MPCOMM_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(MPCOMM_PC_DEPS \"${MPCOMM_PC_DEPS}\")
  set(MPCOMM_SYSTEM_LIB_DIRS \"${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES}\")
  include(\"${CMAKE_SOURCE_DIR}/cmake/install_pkgconfig.cmake\")")

# ---- the Debian package (make deb) -----------------------------------------------------------------
# `make deb` configures a build of its own for it, without CUDA: a clean Debian 12 has neither the CUDA
# runtime nor NCCL as Debian packages, and a libmpcomm.so that needs libcudart.so would not load there.
# Built from a CUDA build anyway, the package is called mpcomm-cuda and says in its description that the
# CUDA 13 runtime and NCCL must be installed by hand (no Debian package provides them).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mpcomm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "mpcomm developers <mpcomm@localhost>")
string(REPLACE ";" ", " _backends "${MPCOMM_BUILT_BACKENDS}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "collective communication for model-parallel training (backends ${_backends})")
set(CPACK_PACKAGE_DESCRIPTION "One Communicator API (all-reduce, broadcast, ..., send/recv, blocking and non-blocking) \
over several backends, the mpcomm launcher and tools (bench, compare, selftest, train, info), the shared and static \
library with its headers, CMake package (find_package(mpcomm)) and pkg-config files, docs and examples.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Library dependencies come from dpkg-shlibdeps (libgloo0, libopenmpi3, libopenblas0, libstdc++6, ...);
# mpirun (openmpi-bin) is what `mpcomm launch --backend mpi` runs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file, so that packages built against libmpcomm.so depend on this package (>= this version).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin")
# `mpcomm compare --report` plots with matplotlib; building against the library needs a compiler; the
# static library and mpcomm-static.pc need the development files of Gloo and Open MPI.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "g++, pkg-config, python3, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "cmake, libgloo-dev, libopenmpi-dev")
# The pkg-config files are written by install(CODE) with the real prefix (/usr), not the staging folder.
set(CPACK_SET_DESTDIR ON)
if(MPCOMM_BUILT_CUDA)
  set(CPACK_PACKAGE_NAME mpcomm-cuda)
  set(CPACK_DEBIAN_PACKAGE_CONFLICTS mpcomm)
  string(APPEND CPACK_PACKAGE_DESCRIPTION " Built with CUDA ${CUDAToolkit_VERSION} (and the nccl backend when \
NCCL was found): the CUDA runtime (libcudart.so.${CUDAToolkit_VERSION_MAJOR}) and NCCL (libnccl.so.2) are not \
Debian packages and must be installed by hand under ${MPCOMM_EXTRA_LIB_DIRS}.")
  # Not from any Debian package: dpkg-shlibdeps is told they are the package's own, so it names none.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${MPCOMM_EXTRA_LIB_DIRS})
endif()
include(CPack)
