"""Stand-in: rank helpers. Megatron-Bridge 067f987 src/megatron/bridge/utils/common_utils.py:26 imports
megatron.core._rank_utils.safe_get_world_size as get_world_size_safe (megatron-core 2a75ac12
megatron/core/_rank_utils.py: torch.distributed when initialised, else RANK / WORLD_SIZE, else
SLURM_PROCID / SLURM_NTASKS, else 0 / 1); print_rank_0 prints on rank 0 only (common_utils.py:97-105)."""
import os

import torch


def get_rank_safe() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    for name in ("RANK", "SLURM_PROCID"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def get_world_size_safe() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    for name in ("WORLD_SIZE", "SLURM_NTASKS"):
        if name in os.environ:
            return int(os.environ[name])
    return 1


def print_rank_0(message: str) -> None:
    if get_rank_safe() == 0:
        print(message, flush=True)
