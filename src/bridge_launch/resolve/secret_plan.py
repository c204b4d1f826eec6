"""Which source each secret of a job has on its cluster (pure: reads no file; submit checks them)."""

from __future__ import annotations

from bridge_launch.core.errors import UsageError
from bridge_launch.core.secret_ref import FILE_HINT, parse


def plan(
    prof: dict, secrets: list, required: list, cli_names: list, cli_sources: dict
) -> tuple[list, dict, list, list]:
    """Which source each secret has on this cluster: (secrets still passed, {name: {"source",
    "optional", "from"}}, errors, warnings). A secret is optional when only the profile's `secrets`
    lists it: then a source that is not there leaves it out. Pure: it reads no file; submit checks."""
    where = f"cluster '{prof['name']}'"
    if prof["backend"] != "slurm":
        for name, src in cli_sources.items():
            raise UsageError(
                f"--secret {name}={src}: a secret source names a file on a Slurm cluster; cluster "
                f"'{prof['name']}' uses the {prof['backend']} backend: pass it by name (--secret {name})"
            )
        return list(secrets), {}, [], []
    section = prof.get("slurm", {})
    listed = section.get("secret_sources") or {}
    refuse = section.get("env_secrets") == "refuse"
    explicit = set(required) | set(cli_names)
    kept, sources, errors, warnings = [], {}, [], []
    for name in secrets:
        if name in cli_sources:
            text, origin = cli_sources[name], "cli"
            parse(text, f"--secret {name}")
        elif name in listed:
            text, origin = listed[name], f"cluster:{prof['name']}"
            parse(text, f"{where} [slurm] secret_sources {name}")
        else:
            if refuse and name in explicit:
                errors.append(
                    f"secret {name} has no source on the cluster, and {where} takes no secret values from "
                    f'your environment ([slurm] env_secrets = "refuse"); give --secret {name}={FILE_HINT}'
                )
                continue
            if refuse:
                warnings.append(
                    f"secret {name} is left out: it has no source on the cluster, and {where} takes no "
                    'secret values from your environment ([slurm] env_secrets = "refuse")'
                )
                continue
            kept.append(name)
            continue
        kept.append(name)
        sources[name] = {"source": text, "optional": name not in explicit, "from": origin}
    return kept, sources, errors, warnings


def env_note(names: list, prof_name: str) -> str:
    """What resolve says (no Slurm to ask yet) about secrets that would go through sbatch's environment."""
    return (
        f"{', '.join(names)}: no source on cluster '{prof_name}', so the value from your environment goes "
        "through sbatch's environment, which slurmctld keeps with the job record (StateSaveLocation/hash.N/"
        "job.N/environment) and, with AccountingStoreFlags=job_env, in the accounting database; give "
        f"--secret NAME={FILE_HINT} instead"
    )
