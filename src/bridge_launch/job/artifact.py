"""What a backend renders: the launch artifact and staged file types."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Artifact:
    kind: str  # "sbatch" | "local-command" | "lepton-job" | "dgxc-workload"
    text: str
    filename: str  # where submit writes it, relative to the run dir
    # the files it calls by name (Slurm: the per-node launcher, the secret reader), relative to the
    # run dir -> text; staged with it, and printed in full by --dry-run
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind, "text": self.text}
        if self.files:
            out["files"] = dict(self.files)
        return out


class Tree(bytes):
    """A staged file whose value is a tar archive, unpacked at its path under the run dir
    (--bridge-src's packed checkout) instead of written as one file."""
