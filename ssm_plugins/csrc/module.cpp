// The Python module object for ssm_plugins._C. Importing it loads this library, whose static
// initialisers register every op (TORCH_LIBRARY_FRAGMENT in each <op>.cpp) with the dispatcher.
// Plain CPython API on purpose: no pybind11/torch headers, so this file compiles in a second.
#include <Python.h>

static struct PyModuleDef ssm_plugins_C = {PyModuleDef_HEAD_INIT, "_C",
                                           "ssm_plugins compiled kernels (ops live in torch.ops.ssm_plugins)",
                                           -1, nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&ssm_plugins_C); }
