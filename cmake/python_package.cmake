# What `pip install --no-build-isolation .` and `make wheel` build (pyproject.toml runs CMake with
# MPCOMM_PYTHON_ONLY=ON through scikit-build-core): the package mpcomm for the torch of the interpreter running
# pip, with libmpcomm.so inside it beside the extension (found there by RUNPATH $ORIGIN). The library keeps no
# version suffix here: a wheel holds no symbolic links.
# Under pip the interpreter running it is the one whose torch the package is for, every time: the build folder
# (build-wheel/) outlives an install, and the cached interpreter of an earlier one may be gone.
if(SKBUILD AND Python_EXECUTABLE)
  set(MPCOMM_TORCH2_PYTHON ${Python_EXECUTABLE} CACHE FILEPATH "" FORCE)
elseif(NOT MPCOMM_TORCH2_PYTHON)
  message(FATAL_ERROR "mpcomm: MPCOMM_PYTHON_ONLY needs MPCOMM_TORCH2_PYTHON, a Python with PyTorch 2.x")
endif()
set_property(TARGET mpcomm_shared PROPERTY VERSION)
set_property(TARGET mpcomm_shared PROPERTY SOVERSION)
include(cmake/torch2.cmake)
install(TARGETS mpcomm_shared LIBRARY DESTINATION mpcomm)
install(TARGETS mpcomm_torch2 LIBRARY DESTINATION mpcomm)
install(DIRECTORY ${MPCOMM_PYTHON2_DIR}/mpcomm/ DESTINATION mpcomm FILES_MATCHING PATTERN "*.py"
        PATTERN __pycache__ EXCLUDE)
