"""What a backend renders: the launch artifact and staged file types."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Artifact:
    """One render of a job: what --dry-run prints and exactly what submit hands the backend. Its
    structured fields say what submit needs to know, so that submit never renders again nor reads
    the text back."""

    kind: str  # "sbatch" | "local-command" | "lepton-job" | "dgxc-workload"
    text: str
    filename: str  # where submit writes it, relative to the run dir
    # the files it calls by name (Slurm: the per-node launcher, the secret reader), relative to the
    # run dir -> text; staged with it, and printed in full by --dry-run
    files: dict[str, str] = field(default_factory=dict)
    segment: int | None = None  # Slurm: the --segment size the script asks for (None: none)
    # Slurm with a canary: the placeholder in `text` that stands for the canary's job id (job/derived.py
    # JOB_PLACEHOLDER), filled in by `after` once the canary is submitted; `canary` is the canary's own
    # artifact, rendered in the same render
    waits_for: str | None = None
    canary: Artifact | None = None

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind, "text": self.text}
        if self.files:
            out["files"] = dict(self.files)
        return out

    def staged(self) -> dict[str, str]:
        """The files submit stages for it: the artifact itself and the files it calls."""
        return {self.filename: self.text, **self.files}

    def after(self, job_id: str) -> Artifact:
        """The artifact with the job id it waits for filled in (no render: the placeholder only)."""
        if self.waits_for is None:
            raise ValueError(f"{self.filename} waits for no job")
        return dataclasses.replace(self, text=self.text.replace(self.waits_for, job_id), waits_for=None, canary=None)


class Tree(bytes):
    """A staged file whose value is a tar archive, unpacked at its path under the run dir
    (--bridge-src's packed checkout) instead of written as one file."""
