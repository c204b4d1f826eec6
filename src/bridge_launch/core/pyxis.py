"""How a Slurm job's image reaches its nodes through pyxis and enroot (pyxis 0.24.0, enroot 8ea147d;
docs/research/pyxis-enroot.md has the lines): once per node and job, into a named container, in a
step of its own before the health step. The profile keys' defaults and the dry run's account of
the cost live here; the batch logic is backends/slurm/batch/containers.sh."""

from __future__ import annotations

HEALTH_MINUTES = 2  # [slurm] health_minutes: the health step's --time, counted from its checks' start
IMAGE_SPACE_GB = 60  # [slurm] image_space_gb: free space enroot's data path needs (a NeMo image, unpacked)


def materialise_line(image: str, space_gb: float) -> str:
    """What the dry run says of the image step: how, where, what it costs with and without squashfuse."""
    # a path is unpacked as it is; anything else is imported first (pyxis_slurmstepd.c:1356-1388)
    what = "the squashfs file" if image.startswith(("/", ".")) else "the image, imported from its registry first,"
    return (
        f"once a node and job, in a step of its own before the health step (the job's time limit its only "
        f"bound): `enroot create` unpacks {what} into enroot's data path as container bridge-launch.RUN.JOB "
        f"(at least {space_gb:g} GB free there, checked first), which the later steps start; removed at the "
        "job's end (a killed job's at the next one's start). A named container is unpacked with or without "
        "pyxis' use_squashfuse (pyxis_slurmstepd.c:122-127): minutes for a 30-50 GB image, once a job"
    )
