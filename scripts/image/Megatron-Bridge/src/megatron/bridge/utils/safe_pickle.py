"""Stand-in: Megatron-Bridge 067f987 src/megatron/bridge/utils/safe_pickle.py's restricted unpickler,
cut down to what a shard's `<key>.jpgs` member needs: builtin containers and bytes, no globals at all
(upstream allows a short list of builtin types and a few Energon state classes, _BUILTIN_SAFE_TYPES
and _ENERGON_SAFE_STATE_GLOBALS)."""
import io
import pickle


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"Restricted unpickler refused {module}.{name}")


def safe_pickle_loads(data: bytes):
    return _Restricted(io.BytesIO(data)).load()
