# The PyTorch backend: the Python package `mpcomm` (build/python/mpcomm) with its extension mpcomm._C, built
# whenever PyTorch's C++ headers (Debian: libtorch-dev), pybind11 and the system Python's headers are found.
# The extension links libmpcomm.so (the public API only) and libtorch_python, which TorchConfig.cmake does not
# name. Without them the build goes on and says why the package was skipped.
include(GNUInstallDirs)
option(MPCOMM_WITH_TORCH "Build the PyTorch backend (python/mpcomm) when PyTorch's C++ headers are found" ON)
set(MPCOMM_TORCH_BUILT OFF)
if(MPCOMM_WITH_TORCH)
  set(_why "")
  # The interpreter PyTorch was installed for (Debian: /usr/bin/python3); a python3 earlier on PATH may
  # have no torch.
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  find_package(pybind11 CONFIG QUIET)
  find_package(Torch CONFIG QUIET)
  find_library(MPCOMM_TORCH_PYTHON_LIBRARY torch_python PATHS ${TORCH_INSTALL_PREFIX}/lib)
  if(NOT Python3_Development.Module_FOUND)
    set(_why "no Python headers for ${Python3_EXECUTABLE} (Debian: python3-dev)")
  elseif(NOT pybind11_FOUND)
    set(_why "pybind11 not found (Debian: pybind11-dev)")
  elseif(NOT Torch_FOUND)
    set(_why "PyTorch's C++ headers not found (Debian: libtorch-dev)")
  elseif(NOT MPCOMM_TORCH_PYTHON_LIBRARY)
    set(_why "libtorch_python not found (Debian: python3-torch)")
  endif()
  if(_why)
    message(STATUS "mpcomm: the PyTorch backend (python package mpcomm) is skipped: ${_why}")
  else()
    set(MPCOMM_TORCH_BUILT ON)
    set(MPCOMM_PYTHON_DIR ${CMAKE_BINARY_DIR}/python)
    file(GLOB MPCOMM_TORCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/torch/*.cc)
    pybind11_add_module(mpcomm_torch MODULE ${MPCOMM_TORCH_SOURCES})
    set_target_properties(mpcomm_torch PROPERTIES OUTPUT_NAME _C
                          LIBRARY_OUTPUT_DIRECTORY ${MPCOMM_PYTHON_DIR}/mpcomm)
    target_include_directories(mpcomm_torch PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_include_directories(mpcomm_torch SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
    target_compile_options(mpcomm_torch PRIVATE ${MPCOMM_WARNINGS} ${TORCH_CXX_FLAGS})
    target_link_libraries(mpcomm_torch PRIVATE mpcomm_shared ${TORCH_LIBRARIES} ${MPCOMM_TORCH_PYTHON_LIBRARY})
    # The pure-Python part, next to the extension, so that PYTHONPATH=build/python imports the package.
    file(GLOB MPCOMM_PY_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/mpcomm/*.py)
    foreach(f ${MPCOMM_PY_FILES})
      get_filename_component(n ${f} NAME)
      configure_file(${f} ${MPCOMM_PYTHON_DIR}/mpcomm/${n} COPYONLY)
    endforeach()
    set(MPCOMM_BUILT_FOR_TORCH ${Torch_VERSION})
    configure_file(${CMAKE_SOURCE_DIR}/python/build_info.py.in ${MPCOMM_PYTHON_DIR}/mpcomm/_build_info.py @ONLY)
    # The extension finds libmpcomm.so beside the build's python/ folder, and, installed, in the prefix's
    # library folder: PREFIX/lib/python3.X/dist-packages/mpcomm (or PREFIX/lib/python3/dist-packages/mpcomm
    # for /usr, Debian's folder for the system Python) is four levels below PREFIX.
    set_target_properties(mpcomm_torch PROPERTIES BUILD_WITH_INSTALL_RPATH ON
                          INSTALL_RPATH "$ORIGIN/../..;$ORIGIN/../../../../${CMAKE_INSTALL_LIBDIR}")
    # Installed into the system Python's site folder for the prefix (docs/install.md); the folder is
    # decided at install time, when `--prefix` is known. MPCOMM_PYTHON_INSTALL_DIR (relative to the prefix,
    # or absolute) overrides it.
    set(MPCOMM_PYTHON_INSTALL_DIR "" CACHE STRING "where cmake --install puts the python package mpcomm (default: the system Python's site folder for the prefix)")
    install(CODE "
      set(_dir \"${MPCOMM_PYTHON_INSTALL_DIR}\")
      if(NOT _dir)
        if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
          set(_dir lib/python3/dist-packages)
        else()
          set(_dir lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages)
        endif()
      endif()
      if(NOT IS_ABSOLUTE \"\${_dir}\")
        set(_dir \"\${CMAKE_INSTALL_PREFIX}/\${_dir}\")
      endif()
      file(INSTALL DESTINATION \"\${_dir}\" TYPE DIRECTORY FILES \"${MPCOMM_PYTHON_DIR}/mpcomm\"
           PATTERN __pycache__ EXCLUDE)" COMPONENT python)
    message(STATUS "mpcomm: the PyTorch backend is built (torch ${Torch_VERSION}, ${Python3_EXECUTABLE})")
  endif()
endif()
