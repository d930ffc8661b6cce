# The PyTorch 2.x backend: the sources of src/torch compiled against a PyTorch installed by pip, whose
# interpreter MPCOMM_TORCH2_PYTHON names (`make test` makes one: scripts/torch2-venv). Nothing is found through
# TorchConfig.cmake, which wants the CUDA toolkit pip's CUDA build was made with; the interpreter says where
# torch's headers and libraries are (cmake/torch_facts.py, as torch.utils.cpp_extension does). The package lands
# in build/python-torch2/mpcomm, with the extension _C linking libmpcomm.so beside the build's python folder or,
# in a wheel, beside itself.
set(MPCOMM_TORCH2_PYTHON "" CACHE FILEPATH "a Python with PyTorch 2.x (pip) to build the backend against")
set(MPCOMM_TORCH2_BUILT OFF)
if(MPCOMM_TORCH2_PYTHON)
  execute_process(COMMAND ${MPCOMM_TORCH2_PYTHON} ${CMAKE_SOURCE_DIR}/cmake/torch_facts.py
                  OUTPUT_VARIABLE _facts ERROR_VARIABLE _facts_err RESULT_VARIABLE _facts_rc)
  if(NOT _facts_rc EQUAL 0)
    message(FATAL_ERROR "mpcomm: ${MPCOMM_TORCH2_PYTHON} cannot tell where its torch is (MPCOMM_TORCH2_PYTHON):\n${_facts_err}")
  endif()
  string(REPLACE "\n" ";" _lines "${_facts}")
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "^([A-Z0-9_]+)=(.*)$")
      set(TORCH2_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
    endif()
  endforeach()
  string(REPLACE "," ";" TORCH2_INCLUDES "${TORCH2_INCLUDES}")
  if(NOT TORCH2_VERSION VERSION_GREATER_EQUAL 2.0)
    message(FATAL_ERROR "mpcomm: MPCOMM_TORCH2_PYTHON has torch ${TORCH2_VERSION}; the 2.x backend needs 2.0 or later")
  endif()
  set(MPCOMM_TORCH2_BUILT ON)
  set(MPCOMM_PYTHON2_DIR ${CMAKE_BINARY_DIR}/python-torch2)
  file(GLOB _torch2_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/torch/*.cc)
  add_library(mpcomm_torch2 MODULE ${_torch2_sources})
  set_target_properties(mpcomm_torch2 PROPERTIES OUTPUT_NAME _C PREFIX "" SUFFIX "${TORCH2_EXT_SUFFIX}"
                        LIBRARY_OUTPUT_DIRECTORY ${MPCOMM_PYTHON2_DIR}/mpcomm
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "$ORIGIN;$ORIGIN/../..")
  target_include_directories(mpcomm_torch2 PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_include_directories(mpcomm_torch2 SYSTEM PRIVATE ${TORCH2_INCLUDES} ${TORCH2_PY_INCLUDE})
  target_compile_definitions(mpcomm_torch2 PRIVATE _GLIBCXX_USE_CXX11_ABI=${TORCH2_CXX11_ABI} TORCH_EXTENSION_NAME=_C)
  target_compile_options(mpcomm_torch2 PRIVATE ${MPCOMM_WARNINGS})
  # pip's torch carries a Gloo of its own and exports its symbols; libmpcomm's gloo backend needs the system's
  # (another version, other layouts). The extension is loaded with RTLD_DEEPBIND (python/mpcomm/torch.py), so
  # that what it loads looks symbols up in its own dependencies first, in the order of its DT_NEEDED: the
  # system's libgloo and libmpcomm come before torch's libraries there.
  if(TARGET gloo)
    target_link_libraries(mpcomm_torch2 PRIVATE "-Wl,--no-as-needed" gloo "-Wl,--as-needed")
  endif()
  target_link_libraries(mpcomm_torch2 PRIVATE mpcomm_shared)
  # torch's libraries are in the process once `import torch` ran, which mpcomm.torch does first.
  foreach(_lib c10 torch torch_cpu torch_python)
    target_link_libraries(mpcomm_torch2 PRIVATE ${TORCH2_LIBDIR}/lib${_lib}.so)
  endforeach()
  file(GLOB _py_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/mpcomm/*.py)
  foreach(f ${_py_files})
    get_filename_component(n ${f} NAME)
    configure_file(${f} ${MPCOMM_PYTHON2_DIR}/mpcomm/${n} COPYONLY)
  endforeach()
  set(MPCOMM_BUILT_FOR_TORCH ${TORCH2_VERSION})
  configure_file(${CMAKE_SOURCE_DIR}/python/build_info.py.in ${MPCOMM_PYTHON2_DIR}/mpcomm/_build_info.py @ONLY)
  message(STATUS "mpcomm: the PyTorch 2.x backend is built (torch ${TORCH2_VERSION}, ${MPCOMM_TORCH2_PYTHON})")
endif()
