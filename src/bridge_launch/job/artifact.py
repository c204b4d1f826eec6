"""What a backend renders: the launch artifact and staged file types."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Artifact:
    kind: str  # "sbatch" | "local-command" | "lepton-job" | "dgxc-workload"
    text: str
    filename: str  # where submit writes it, relative to the run dir

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text}


class Tree(bytes):
    """A staged file whose value is a tar archive, unpacked at its path under the run dir
    (--bridge-src's packed checkout) instead of written as one file."""
