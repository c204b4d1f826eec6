"""Jobs derived from a resolved job: the canary's own job, the real job gated on it, and the spec
the canary's in-job checks read."""

from __future__ import annotations

import dataclasses

SUFFIX = "-canary"  # the canary's run id (job name, sbatch file) is the run's with this suffix


JOB_PLACEHOLDER = "@CANARY_JOB_ID@"  # in --dry-run's sbatch: the canary's job id, known at submit


SPEC_DIR = "canary"  # under the run dir: <run id>.spec.json (written at submit) and <run id>.json (the report)


def spec_rel(run_id: str) -> str:
    return f"{SPEC_DIR}/{run_id}.spec.json"


def report_path(run_dir: str, run_id: str) -> str:
    return f"{run_dir}/{SPEC_DIR}/{run_id}.json"


def spec(job) -> dict:
    """What the in-job checks need (no secrets): the job's recipe and exact overrides, paths, the HF
    revisions, the schema's source, the expected bus bandwidth."""
    from bridge_launch.spec import schema

    c, cfg = job.canary, job.config
    src = {k: v for k, v in schema.at(job.bridge_commit).source.items() if k not in ("note", "absent_classes")}
    return {
        "run_id": job.run_id,
        "report": report_path(job.run_dir, job.run_id),
        "workload": job.workload,
        "entry": job.entry,
        "recipe": job.upstream,
        "mode": job.mode,
        "args": list(job.args),
        "argv": job.recipe_argv() if job.workload == "megatron-bridge" else [],
        # the shipped recipe module the job's entry registers first (backends/base.py recipe_module_path)
        "recipe_module": (
            f"{job.run_dir}/workload/bridge_recipes/{job.bridge_recipe_module}" if job.bridge_recipe_module else None
        ),
        "world_size": job.world_size,
        "nodes": job.nodes,
        "gpu_type": job.gpu_type,
        "container": job.container,
        "mounts": list(job.mounts),
        "schema_source": src,
        "dataset": {"kind": job.dataset_kind, "path": cfg.get("dataset.path")},
        "pretrained_checkpoint": cfg.get("checkpoint.pretrained_checkpoint"),
        "hf": {
            "model": job.hf_model,
            "model_revision": cfg.get("model.hf_model_revision"),
            "processor": cfg.get("dataset.task_encoder.hf_processor_path") or job.hf_model,
            "processor_revision": cfg.get("dataset.task_encoder.hf_processor_revision"),
        },
        "fabric": {"expect_mnnvl": job.profile.get("nvlink_domain_nodes", 0) > 1 and job.gpu_type != "cpu"},
        "network": {
            "sizes": list(c["busbw_sizes"]),
            "iters": c["busbw_iters"],
            "expected_busbw_gbps": c["busbw_gbps"],
            "min_fraction": c["busbw_min_fraction"],
        },
        "check_timeout_s": c["check_timeout"],
    }


def canary_job(job, nodes: int | None = None):
    """The canary as a job of its own, for the same renderer: same image, mounts, environment,
    partition, account; its own run id suffix, node count and time limit; no chain, no retry; its entry is
    workload/cluster_checks.py with the spec."""
    c = job.canary
    n = nodes or c["nodes"]
    # no time-limit signal, and no health step: the canary's own checks cover what it checks
    sched = {k: v for k, v in job.scheduler.items() if k not in ("signal", "health_check")}
    if job.backend == "slurm":
        sched["time"] = c["time"]
    return dataclasses.replace(
        job,
        run_id=job.run_id + SUFFIX,
        nodes=n,
        world_size=n * job.gpus_per_node,
        workload="canary",
        chain=None,
        retry=None,  # a check: its failure is the verdict, never retried
        scheduler=sched,
        args=[f"{job.run_dir}/{spec_rel(job.run_id)}"],
        canary=None,
    )


def gated(job, canary_job_id: str):
    """The real Slurm job, waiting for the canary: it starts only if the canary succeeds, and Slurm
    removes it when the canary fails (--kill-on-invalid-dep)."""
    sched = dict(job.scheduler)
    sched["sbatch_args"] = [
        *sched.get("sbatch_args", []),
        f"--dependency=afterok:{canary_job_id}",
        "--kill-on-invalid-dep=yes",
    ]
    return dataclasses.replace(job, scheduler=sched)
