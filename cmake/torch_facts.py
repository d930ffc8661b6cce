"""Prints what cmake/torch2.cmake needs to build an extension against the torch this interpreter imports,
one KEY=VALUE per line (the same facts torch.utils.cpp_extension uses)."""
import logging
import sysconfig

import torch
import torch.utils.cpp_extension as ext  # noqa: E402

# cpp_extension warns when no CUDA runtime is found; a CPU build does not need one.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

facts = {
    "VERSION": torch.__version__.split("+")[0],
    "INCLUDES": ",".join(ext.include_paths()),
    "LIBDIR": ext.library_paths()[0],
    "CXX11_ABI": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    "PY_INCLUDE": sysconfig.get_paths()["include"],
    "EXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
}
for k, v in facts.items():
    print(f"{k}={v}")
