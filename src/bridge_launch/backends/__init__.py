"""One module per platform. Each exposes render(job, run_dir) -> Artifact and a Backend
class (submit/status/logs/cancel). Modules are imported on demand: a cloud backend may
pull in nemo-run, which costs seconds."""

from __future__ import annotations

import importlib

_MODULES = {"local": "local", "slurm": "slurm.backend", "lepton": "lepton", "dgxcloud": "dgxcloud"}
# Where a platform's render and secret_origins live when not in its module: Slurm's in render.py,
# which --dry-run loads without the backend's sbatch, sacct and log-reading code (issue 36).
_RENDER = {"slurm": "slurm.render"}


def module(backend: str):
    return importlib.import_module(f".{_MODULES[backend]}", __name__)


def _renderer(backend: str):
    """The module with the platform's render and secret_origins (the same functions module() has)."""
    return importlib.import_module(f".{_RENDER.get(backend) or _MODULES[backend]}", __name__)


def render(job):
    """The exact launch artifact submit hands to the backend (dry-run shows the same); rendered
    once per submit: what submit needs besides the text is in the artifact's fields."""
    return _renderer(job.backend).render(job)


def backend(name: str):
    return module(name).Backend()


def secret_origins(job) -> dict:
    """{secret name: (where its value comes from, in the platform's own terms, and the layer that set
    that source)}: --dry-run shows them."""
    return _renderer(job.backend).secret_origins(job)
