"""ctypes bindings for the llama.cpp functions DFlash needs that llama-cpp-python does not bind.

They are declared in ``src/llama-ext.h`` (a C++ header without ``extern "C"``), so the shipped
``libllama.so`` exports them under mangled names; the same technique as
``llama_cpp.llama_cpp_ext``: try the plain name, the Itanium (Linux/macOS) and the MSVC mangling.
A missing symbol makes :data:`AVAILABLE` false and :data:`MISSING` names it; nothing raises at
import, so the engine can fall back instead of failing.
"""

from __future__ import annotations

import ctypes

from llama_cpp import llama_cpp as capi

_lib = capi._lib
MISSING: list[str] = []


def _bind(names: tuple[str, ...], argtypes: list, restype):
    for name in names:
        func = getattr(_lib, name, None)
        if func is not None:
            func.argtypes = argtypes
            func.restype = restype
            return func
    MISSING.append(names[0])
    return None


_ctx = capi.llama_context_p_ctypes
_model = capi.llama_model_p_ctypes

# void llama_set_embeddings_layer_inp(llama_context * ctx, uint32_t lid, bool value);
set_embeddings_layer_inp = _bind(
    (
        "llama_set_embeddings_layer_inp",
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
    ),
    [_ctx, ctypes.c_uint32, ctypes.c_bool],
    None,
)

# float * llama_get_embeddings_layer_inp(llama_context * ctx, uint32_t lid);
get_embeddings_layer_inp = _bind(
    (
        "llama_get_embeddings_layer_inp",
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
    ),
    [_ctx, ctypes.c_uint32],
    ctypes.POINTER(ctypes.c_float),
)

# const int32_t * llama_model_target_layer_ids(const llama_model * model);
model_target_layer_ids = _bind(
    (
        "llama_model_target_layer_ids",
        "_Z28llama_model_target_layer_idsPK11llama_model",
        "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z",
    ),
    [_model],
    ctypes.POINTER(ctypes.c_int32),
)

# uint32_t llama_model_target_layer_ids_n(const llama_model * model);
model_target_layer_ids_n = _bind(
    (
        "llama_model_target_layer_ids_n",
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z",
    ),
    [_model],
    ctypes.c_uint32,
)

# llama_context * llama_get_ctx_other(llama_context * ctx);
get_ctx_other = _bind(
    (
        "llama_get_ctx_other",
        "_Z19llama_get_ctx_otherP13llama_context",
        "?llama_get_ctx_other@@YAPEAUllama_context@@PEAU1@@Z",
    ),
    [_ctx],
    ctypes.c_void_p,
)

AVAILABLE = not MISSING


def target_layer_ids(model) -> list[int]:
    """The drafter's target layer ids, as llama.cpp loaded them."""
    n = int(model_target_layer_ids_n(model))
    ptr = model_target_layer_ids(model)
    return [int(ptr[i]) for i in range(n)] if n and ptr else []
