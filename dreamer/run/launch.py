"""How this process was launched: alone, by torchrun, or as one of several SLURM tasks (no torch
imported here: train.py calls it before validating the config)."""
from __future__ import annotations

import os


def export_slurm_rendezvous() -> bool:
    """One of several SLURM tasks (`hydra/launcher=slurm` with tasks_per_node/nodes, or `srun`):
    export what torch.distributed's env:// rendezvous reads (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR = the job's first node, MASTER_PORT from the job id) from SLURM's variables, as
    torchrun would. Nothing happens under torchrun or for a single task. Returns whether it did."""
    if "WORLD_SIZE" in os.environ or "SLURM_PROCID" not in os.environ \
            or int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return False
    from submitit.helpers import TorchDistributedEnvironment

    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")  # plain srun: the same SLURM variables
    # every rank keeps all of its node's GPUs visible: rank r uses cuda:<local rank>
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True
