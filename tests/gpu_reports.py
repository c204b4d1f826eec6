"""`nvidia-smi -q` reports for the health step's tests, in the driver's layout: the fields and
indentation of a real report (an A100's, driver 510.73.08, quoted in stas00/ml-engineering
compute/accelerator/nvidia/debug.md: "Attached GPUs", one "GPU <bus id>" block each with "Product
Name", "ECC Errors" -> "Volatile"/"Aggregate" -> "SRAM|DRAM Correctable|Uncorrectable", "Retired
Pages" and "Remapped Rows" -> "Correctable Error", "Uncorrectable Error", "Pending", "Remapping
Failure Occurred"), here for GB200s."""

from __future__ import annotations

import os
from pathlib import Path


def fabric_block(clique: str) -> str:
    """A GB200's `Fabric` section (fields as fabric_checks.parse_fabric reads them: State, Status,
    CliqueId, ClusterUUID; nvidia-smi -q on a registered NVL72 tray)."""
    return f"""    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : {clique}
        ClusterUUID                       : 6e1a4b52-0000-4000-8000-00000000c0de
        Health
            Bandwidth                     : Full
"""


def gpu_block(
    bus: str, *, dram_uncorrectable: int = 0, aggregate_uncorrectable: int = 0, pending: str = "No", clique: str = ""
) -> str:
    fabric = fabric_block(clique) if clique else ""
    return f"""GPU {bus}
    Product Name                          : NVIDIA GB200
    Product Brand                         : NVIDIA
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 3
            DRAM Uncorrectable            : {dram_uncorrectable}
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 41
            DRAM Uncorrectable            : {aggregate_uncorrectable}
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : {pending}
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 639 bank(s)
            High                          : 1 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
{fabric}"""


def report(gpus: int = 4, clique: str = "", **bad) -> str:
    """A node's report: GPU 0 gets `bad` (e.g. dram_uncorrectable=2), the others are healthy; with
    `clique`, every GPU's Fabric section names that NVLink clique."""
    blocks = [gpu_block(f"00000000:0{i + 1}:00.0", clique=clique, **(bad if i == 0 else {})) for i in range(gpus)]
    head = (
        "\n==============NVSMI LOG==============\n\n"
        "Timestamp                                 : Fri Dec  4 10:00:00 2026\n"
        "Driver Version                            : 580.65.06\nCUDA Version                              : 13.0\n\n"
        f"Attached GPUs                             : {gpus}\n"
    )
    return head + "".join(blocks)


def fake_nvidia_smi(bin_dir: Path, bad_node: str | None = None, gpus: int = 4, cliques: dict | None = None) -> Path:
    """An `nvidia-smi` for PATH that prints `report()`: with uncorrectable ECC errors on GPU 0 when the
    node (Slurm's SLURMD_NODENAME, else the hostname) is `bad_node`; `cliques` {node: NVLink clique}
    gives the named nodes healthy reports with a Fabric section in that clique."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "healthy.txt").write_text(report(gpus))
    (bin_dir / "bad.txt").write_text(report(gpus, dram_uncorrectable=2))
    own = ""
    for node, clique in (cliques or {}).items():
        (bin_dir / f"{node}.txt").write_text(report(gpus, clique=clique))
        own += f'if [ "$node" = {node!r} ]; then cat {str(bin_dir / f"{node}.txt")!r}; exit 0; fi\n'
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/bash\n"
        '[ "$1" = "-q" ] || { echo "fake nvidia-smi: only -q" >&2; exit 2; }\n'
        'node="${SLURMD_NODENAME:-$(hostname)}"\n'
        + own
        + f'if [ "$node" = {bad_node or "-"!r} ]; then cat {str(bin_dir / "bad.txt")!r}; '
        f"else cat {str(bin_dir / 'healthy.txt')!r}; fi\n"
    )
    os.chmod(smi, 0o755)
    return smi


def fake_dmesg(bin_dir: Path, lines: list[str] | None = None, refuse: bool = False) -> Path:
    """A `dmesg` for PATH that prints `lines` (with `--time-format iso`, util-linux's form:
    "2026-12-05T16:02:40,161197+00:00 message"), or refuses as a container without the right does."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "dmesg.txt").write_text("".join(line + "\n" for line in lines or []))
    out = bin_dir / "dmesg"
    body = (
        'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1\n'
        if refuse
        else f"cat {str(bin_dir / 'dmesg.txt')!r}\n"
    )
    out.write_text("#!/bin/bash\n" + body)
    os.chmod(out, 0o755)
    return out
