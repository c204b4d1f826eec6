from __future__ import annotations

import json
import pickle
import tarfile
from pathlib import Path

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.data import prepare, source, synthetic, tokens
from data_sources import DS, _prep

# an isolated state dir for every test here
pytestmark = pytest.mark.usefixtures("home")

pytest.importorskip("PIL")


def _tree_bytes(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.tar"))}


def _local_slurm_up() -> bool:
    import os
    import shutil
    import subprocess

    conf = "/var/lib/bridge-launch-slurm/etc/slurm.conf"
    if not shutil.which("sinfo") or not os.path.exists(conf):
        return False
    r = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env={**os.environ, "SLURM_CONF": conf}
    )
    return r.returncode == 0 and any(s in r.stdout for s in ("idle", "mix", "alloc"))


@pytest.mark.slow
def test_convert_load_back_and_determinism(src, tmp_path):
    pytest.importorskip("megatron.energon")
    from bridge_launch.data import inspect as insp

    m1 = _prep(src, tmp_path / "a", num_workers=1)
    m2 = _prep(src, tmp_path / "b", num_workers=3)
    a, b = tmp_path / "a", tmp_path / "b"
    # layout
    assert (a / ".nv-meta" / "split.yaml").is_file() and (a / ".nv-meta" / ".info.json").is_file()
    assert (a / ".nv-meta" / "dataset.yaml").read_text() == prepare.TRAINING_DATASET_YAML
    assert all((a / f"{t.name}.idx").is_file() for t in a.glob("*.tar"))
    assert not list(tmp_path.glob(".*partial*"))
    # same bytes regardless of the number of workers (and across runs)
    assert _tree_bytes(a) == _tree_bytes(b)
    assert (a / ".nv-meta/split.yaml").read_text() == (b / ".nv-meta/split.yaml").read_text()

    def strip(m):
        return {k: v for k, v in m.items() if k not in ("timings_s", "output_dir")}

    assert strip(m1) == strip(m2) == strip(json.loads((a / "manifest.json").read_text()))
    # counts and split membership
    c = m1["counts"]
    assert c["train"] + c["val"] == 24 and c["val"] > 0
    assert sorted(p.name for p in a.glob("*.tar"))[0] == "train-shard-000000.tar"
    assert m1["shards"] == {"train": -(-c["train"] // 5), "val": -(-c["val"] // 5)}
    assert {f["path"] for f in m1["source_files"]} == {"clevr_2/clevr_2.jsonl", "clevr_2/media/shard_000000.tar"}
    jl = src / "clevr_2/clevr_2.jsonl"
    assert next(f for f in m1["source_files"] if f["path"].endswith(".jsonl"))["sha256"] == source.sha256_file(jl)
    # deterministic tar members; .jpgs is exactly pickle.dumps(list of the images) (kernel-copied or not)
    with tarfile.open(a / "train-shard-000000.tar") as tf:
        ms = tf.getmembers()
        assert all(m.mtime == 0 and m.mode == 0o644 and m.uname == "" for m in ms)
        assert [m.name.rsplit(".", 1)[1] for m in ms[:2]] == ["jpgs", "json"]
    sizes = []
    for shard in a.glob("*.tar"):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers()[::2]:
                raw = tf.extractfile(m).read()
                imgs = pickle.loads(raw)
                assert pickle.dumps(imgs, protocol=4) == raw
                sizes += map(len, imgs)
    assert max(sizes) >= 64 * 1024 > min(sizes)  # both sides of the pickler's frame limit
    # loaded back with Energon: every key, in its split, with its images
    records = {json.loads(ln)["id"]: json.loads(ln) for ln in jl.read_text().splitlines()}
    for split in ("train", "val"):
        got = list(insp.iter_samples(a, split))
        assert len(got) == c[split]
        for key, imgs, conv in got:
            assert source.sample_split(key, 0.25) == split
            rec = records[key.split("__", 1)[1]]
            refs = [p["image"] for p in rec["messages"][0]["content"] if p["type"] == "image"]
            assert len(imgs) == len(refs) and imgs[0][:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0")
            assert conv[0]["content"][0] == {"type": "image"}


@pytest.mark.slow
def test_ctrl_c_during_a_parallel_prepare_leaves_nothing(tmp_path):
    """Ctrl-C (SIGINT to the whole foreground process group, workers included) at three moments of
    the write phase: exit 130, no traceback from any process, no output and no partial directory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    srcdir = synthetic.make_source(tmp_path / "src", n=400, seed=3, distinct_images=8, noisy_every=3)
    for i, wait_shards in enumerate((1, 20, 120)):
        out = tmp_path / f"out{i}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bridge_launch.cli.app",
                "data",
                "prepare",
                DS,
                "--source-dir",
                str(srcdir),
                "--output-dir",
                str(out),
                "--subsets",
                "clevr_2",
                "--skip-source-integrity-check",
                "--max-samples-per-tar",
                "1",
                "--num-workers",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            parts = list(tmp_path.glob(f".out{i}.partial-*"))
            if parts and len(list(parts[0].glob("*.tar"))) >= wait_shards:
                break
            time.sleep(0.01)
        if proc.poll() is not None:
            pytest.fail(f"prepare ended before the interrupt: {proc.returncode} {proc.stderr.read()}")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "Error" not in err, err
        assert not out.exists() and not list(tmp_path.glob(f".out{i}.partial-*")), wait_shards


@pytest.mark.slow
def test_index_equals_energons_own_prepare_dataset(src, tmp_path):
    """The .nv-meta/ and *.tar.idx written from the writers' offsets are what megatron-energon's
    prepare_dataset writes when it scans the same shards (row order aside: Energon's own depends on
    which of its workers finishes first)."""
    pytest.importorskip("megatron.energon")
    import contextlib
    import io
    import shutil
    import sqlite3

    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    a, b = tmp_path / "ours", tmp_path / "energon"
    _prep(src, a, num_workers=2)
    b.mkdir()
    names = sorted(p.name for p in a.glob("*.tar"))
    assert len(names) >= 4
    for n in names:
        shutil.copy(a / n, b / n)
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            b,
            names,
            split_parts_patterns=[(s, f"{s}-shard-.*") for s in ("train", "val")],
            shuffle_seed=None,
            workers=2,
        )
    for n in names:
        assert (a / f"{n}.idx").read_bytes() == (b / f"{n}.idx").read_bytes(), n
    for f in ("split.yaml", ".info.json"):
        assert (a / ".nv-meta" / f).read_text() == (b / ".nv-meta" / f).read_text(), f
    assert len((a / ".nv-meta/index.uuid").read_text()) == 36

    def rows(d):
        db = sqlite3.connect(d / ".nv-meta/index.sqlite")
        out = {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in ("samples", "sample_parts")}
        out["schema"] = sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
        db.close()
        return out

    ours, theirs = rows(a), rows(b)
    assert ours == theirs
    assert len(ours["samples"]) == 24 and len(ours["sample_parts"]) == 48


def _index_files(d: Path) -> dict:
    import sqlite3

    db = sqlite3.connect(d / ".nv-meta/index.sqlite")
    out = {t: db.execute(f"SELECT * FROM {t}").fetchall() for t in ("samples", "sample_parts")}
    out["schema"] = sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
    db.close()
    for f in ("split.yaml", ".info.json", "dataset.yaml"):
        out[f] = (d / ".nv-meta" / f).read_bytes()
    return {**out, **_tree_bytes(d), **{p.name: p.read_bytes() for p in d.glob("*.tar.idx")}}


_FRESH_PREPARE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from bridge_launch.data import prepare
from data_sources import _prep
if sys.argv[4] == "break":  # the light way fails: the plain import must take over
    prepare._ENERGON_PACKAGES += ("megatron.energon.no_such_package",)
m = _prep(Path(sys.argv[1]), Path(sys.argv[2]), num_workers=2)
torch = "torch" in sys.modules
import megatron.energon
print(json.dumps({"torch": torch, "energon": m["energon"], "real": megatron.energon.__version__}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("way", ["light", "break"])
def test_a_fresh_process_indexes_without_torch_and_writes_the_same_index(src, tmp_path, way):
    """In a process that has not imported Energon, prepare loads Energon's index writer without its
    packages' __init__s (no torch), leaves no trace of that in sys.modules (a later `import
    megatron.energon` is the real one), and writes what a process with the real Energon writes; when
    that way fails, the plain import does the same work."""
    import subprocess
    import sys

    pytest.importorskip("megatron.energon")
    import megatron.energon  # this process: the index through Energon's real packages

    fresh, here = tmp_path / "fresh", tmp_path / "here"
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_PREPARE, str(src), str(fresh), str(Path(__file__).parents[1]), way],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got == {
        "torch": way == "break",
        "energon": f"megatron-energon {megatron.energon.__version__}",
        "real": megatron.energon.__version__,
    }
    _prep(src, here, num_workers=2)
    assert _index_files(fresh) == _index_files(here)


@pytest.mark.slow
def test_write_manifest_then_verified_run_and_cli_report(src, tmp_path):
    pytest.importorskip("megatron.energon")
    from typer.testing import CliRunner

    from bridge_launch.cli.datasets import app

    m = _prep(src, tmp_path / "a", skip_integrity=False, write_manifest=True)
    assert m["source_integrity_verified"] is False
    pins, origin = source.find_pins(DS, "clevr_2")
    assert origin.startswith("user:") and set(pins) == {"clevr_2/clevr_2.jsonl", "clevr_2/media/shard_000000.tar"}
    # later runs verify without a flag
    m2 = _prep(src, tmp_path / "b", skip_integrity=False)
    assert m2["source_integrity_verified"] is True
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "b"), "--recipe", "qwen35-vl-sft", "--output", "json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["splits"]["train"]["samples"] == m2["counts"]["train"]
    assert rep["text_tokens"] == "estimate"
    p = rep["packing"]
    assert p["seq_length"] == 131072 and p["packing_buffer_size"] == 8 and p["pad_multiple"] == 16
    assert p["padding_fraction"] > 0.95 and p["suggestions"]["settings"]
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "b"), "--recipe", "qwen35-vl-sft"])
    assert r.exit_code == 0 and "padding:" in r.output and "settings that reduce padding" in r.output


@pytest.mark.slow
def test_exact_text_tokens_with_local_tokenizer(src, tmp_path):
    pytest.importorskip("megatron.energon")
    tk = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tok = tk.Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    from bridge_launch.data import inspect as insp

    _prep(src, tmp_path / "a")
    meas = insp.measure(tmp_path / "a", tokenizer=str(tmp_path / "tok"))
    assert meas["text_tokens_exact"]
    key, imgs, conv = next(insp.iter_samples(tmp_path / "a", "train"))
    words = len(pre_tokenizers.Whitespace().pre_tokenize_str(tokens.chatml_text(conv)))
    assert meas["splits"]["train"]["text_tokens"][0] == words + 5 * len(conv) + 2 * len(imgs)


@pytest.mark.slow
def test_inspect_refuses_unprepared_dir(tmp_path):
    pytest.importorskip("megatron.energon")
    from bridge_launch.data import inspect as insp

    with pytest.raises(UsageError, match="not a prepared Energon dataset"):
        insp.measure(tmp_path)


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_job_array_writes_the_same_shards(src, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")
    m1 = _prep(src, tmp_path / "local", num_workers=2)
    m2 = _prep(src, tmp_path / "slurm", num_workers=2, cluster="local-slurm")
    assert _tree_bytes(tmp_path / "local") == _tree_bytes(tmp_path / "slurm")
    assert m1["counts"] == m2["counts"]
    assert not list(tmp_path.glob(".*submitit"))  # submitit's folder is removed on success


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_job_array_gets_the_profiles_time_limit_as_slurm_reads_it(src, tmp_path, monkeypatch, home):
    """A profile time of "1-12" is 36 hours for the array's elements (it once became 2 minutes)."""
    import os
    import subprocess
    import time

    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")
    (home / "clusters" / "long.toml").write_text('extends = "local-slurm"\n[slurm]\ntime = "1-12"\n')
    submitted = []
    _prep(src, tmp_path / "out", num_workers=1, cluster="long", log=submitted.append)
    array = next(line.split()[3] for line in submitted if line.startswith("submitted job array "))
    limits: list = []
    deadline = time.monotonic() + 60
    while not limits and time.monotonic() < deadline:  # slurmdbd records finished jobs asynchronously
        limits = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", array, "-o", "Timelimit"],
            capture_output=True,
            text=True,
            env=dict(os.environ),
        ).stdout.split()
        if not limits:
            time.sleep(1)
    assert limits and set(limits) == {"1-12:00:00"}, limits


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_job_array_interrupted_leaves_nothing_running_or_written(src, tmp_path, monkeypatch):
    """Ctrl-C while the array runs: the elements still queued or running are cancelled and waited
    for before the partial directory is deleted, so nothing writes into it afterwards."""
    import os
    import subprocess
    import time

    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")

    def interrupt(_n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _prep(src, tmp_path / "out", num_workers=2, max_samples_per_tar=1, cluster="local-slurm", on_progress=interrupt)
    left = subprocess.run(
        ["squeue", "-h", "-n", "bridge-launch-data-prepare", "-o", "%i %T"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    ).stdout.strip()
    assert left == "", left
    time.sleep(2)  # anything still writing would show up now
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*[0-9]"))
