"""Stand-ins for the packages Megatron-Bridge imports unguarded on the recipe path that cannot be
installed here, so that configs build on CPU. No recipe value comes from them: configs only name
their classes, they do not run them.

- transformer_engine, transformer_engine_torch: install only with CUDA. Imported unguarded at
  987244934 src/megatron/bridge/peft/lora_layers.py:20 and diffusion/models/wan/utils.py:20;
  nvidia-modelopt registers their classes as torch.nn.Module subclasses
  (modelopt/torch/quantization/plugins/transformer_engine.py:51). Every attribute of every module
  is a torch.nn.Module subclass that does nothing.
- nvidia_resiliency_ext.inprocess: imported unguarded at 987244934 training/pretrain.py:16 and
  training/inprocess_restart.py:22. PyPI serves nvidia-resiliency-ext 0.4.1 here, which has no
  __version__, and megatron-core 458c8d0e's is_nvrx_min_version()
  (dist_checkpointing/strategies/nvrx.py:75-90) fails on it at import. Only the top package and
  `inprocess` are stood in; `nvidia_resiliency_ext.checkpointing` stays missing, so megatron-core
  and Megatron-Bridge take their no-NVRx paths (nvrx.py:20-31, training/checkpointing.py:94).
- The training loop (install_trainer_probe): it needs GPUs. probe_trainer.py says what replaces it.
"""

import importlib.abc
import importlib.machinery
import sys
import types

VERSION = "2.9.0"  # reported as transformer_engine.__version__
NVRX = ("nvidia_resiliency_ext", "nvidia_resiliency_ext.inprocess")


class _Any(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__name__}.{name}")

    def __call__(cls, *_a, **_k):
        return type.__call__(cls)

    def __bool__(cls):
        return False


def _stub(name):
    import torch

    def init(self, *_a, **_k):
        torch.nn.Module.__init__(self)

    return _Any(name.rsplit(".", 1)[-1], (torch.nn.Module,), {"__init__": init})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        v = _stub(name)
        setattr(self, name, v)
        return v


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):  # noqa: ARG002 - the finder protocol
        top = fullname.split(".")[0]
        if top in ("transformer_engine", "transformer_engine_torch") or fullname in NVRX:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Module(spec.name)
        m.__path__ = []
        m.__version__ = VERSION
        return m

    def exec_module(self, module):
        pass


def install() -> None:
    sys.meta_path.insert(0, _Finder())


TRAINING_LOOPS = {"megatron.bridge.training.pretrain": "pretrain", "megatron.bridge.training.finetune": "finetune"}


class _TrainerProbe(importlib.abc.MetaPathFinder):
    """Megatron-Bridge's own pretrain/finetune modules, imported as they are, with their training
    function replaced by probe_trainer's as soon as the module has run (before run_recipe.py's
    `from ... import pretrain` can bind the real one)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in TRAINING_LOOPS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                real_exec = spec.loader.exec_module

                def exec_module(module, _real=real_exec, _name=TRAINING_LOOPS[fullname]):
                    _real(module)
                    import probe_trainer

                    setattr(module, _name, getattr(probe_trainer, _name))

                spec.loader.exec_module = exec_module
                return spec
        return None


def install_trainer_probe() -> None:
    sys.meta_path.insert(0, _TrainerProbe())


def fake_gpu(spec: str) -> None:
    """Answer torch.cuda's device questions as the job's GPU would ("NAME:MAJOR:MINOR", e.g.
    "NVIDIA GB200:10:0"): validate() asks the architecture once (flex_dispatcher_backend.py:78 at
    987244934, :95 at 067f987), and no GPU is here."""
    import torch

    name, major, minor = (spec.split(":") + ["10", "0"])[:3]

    class Props:
        pass

    Props.name, Props.major, Props.minor = name, int(major), int(minor)
    Props.multi_processor_count, Props.total_memory = 152, 192 * 2**30
    torch.cuda.get_device_properties = lambda *_a, **_k: Props()
    torch.cuda.get_device_capability = lambda *_a, **_k: (Props.major, Props.minor)
