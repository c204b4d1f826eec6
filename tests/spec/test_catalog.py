import re

import pytest

from cli_inputs import _complete
from conftest import run_cli, write


def test_broken_user_profile_is_reported_where_used_and_affects_nothing_else(cli, home):
    write(home / "clusters" / "mine.toml", 'name = "mine\nbackend = "local"\n')  # unterminated string
    r = cli("submit", "smoke", "--dry-run")
    assert r.code == 0 and r.err == "", r.err
    r = cli("clusters", "list")
    assert r.code == 0 and "gb200-32" in r.out and "local" in r.out
    assert re.search(r"warning: left out: .*mine\.toml:1:\d+: invalid TOML", r.err), r.err
    assert [c["name"] for c in cli("clusters", "list", "-o", "json").json()].count("local") == 1
    r = cli("submit", "smoke", "-c", "mine", "--dry-run")
    assert r.code == 2 and re.search(r"mine\.toml:1:\d+: invalid TOML", r.err), r.err


def test_bad_key_in_a_user_profile_names_file_line_and_valid_keys(cli, home):
    write(home / "clusters" / "mine.toml", 'name = "mine"\nextends = "local"\n\n[slurm]\nparition = "x"\n')
    r = cli("clusters", "show", "mine")
    assert r.code == 2
    line = r.err.strip()
    assert re.search(
        r"mine\.toml:5: cluster profile 'mine': unknown \[slurm\] key 'parition'; did you mean "
        r"'partition'",
        line,
    ), line
    assert "profile keys list" not in line and "list them with" not in line  # no command that does not exist
    assert cli("clusters", "list").code == 0
    assert cli("submit", "smoke", "--dry-run").code == 0


def test_broken_user_recipe_and_overlay_leave_the_listings_whole(cli, home):
    write(home / "recipes" / "mine.toml", 'name = "mine"\nextends = "smoke"\n[config\n')
    write(home / "recipes" / "overlays" / "fast.toml", 'name = "fast"\n[config]\ntrain.train_iters = "many"\n')
    r = cli("recipes", "list", "-o", "json")
    assert r.code == 0 and len(r.json()) == 6 and "mine.toml:3" in r.err
    r = cli("overlays", "list")
    assert r.code == 0 and "validation-run" in r.out
    assert "fast.toml:3: overlay 'fast': train.train_iters expects an integer" in r.err
    r = cli("submit", "mine", "--dry-run")
    assert r.code == 2 and "mine.toml:3" in r.err
    assert cli("submit", "smoke", "--dry-run").code == 0


def test_a_broken_user_file_with_a_shipped_name_is_not_silently_replaced_by_the_shipped_one(cli, home):
    write(home / "clusters" / "gb200-8.toml", 'name = "gb200-8"\nextends = "gb200-8"\n[slurm\naccount = "me"\n')
    r = cli("submit", "smoke", "-c", "gb200-8", "--dry-run")
    assert r.code == 2 and "gb200-8.toml:3" in r.err


def test_completion_offers_nothing_rather_than_failing_on_a_broken_user_file(home):
    write(home / "recipes" / "mine.toml", "[broken\n")
    assert "smoke" in _complete("bridge-launch submit sm")


@pytest.mark.usefixtures("home")
def test_unknown_recipe_counts_and_suggests_names_not_aliases():
    r = run_cli("submit", "qwen35-vl", "--dry-run")
    line = r.err.strip()
    assert r.code == 2 and "did you mean 'qwen35-vl-sft' or 'qwen35-vl-sft-mxfp8'" in line, line
    assert "bf16" not in line.split("(valid")[0]  # an alias of qwen35-vl-sft is not a second choice
    listed = [x["name"] for x in run_cli("recipes", "list", "-o", "json").json()]
    assert line.endswith("(valid: " + ", ".join(sorted(listed)) + ")")
    assert "qwen35-vl-sft-common" not in line


def test_unknown_keys_in_user_overlay_and_recipe_files_are_refused_like_on_the_command_line(cli, home):
    write(home / "recipes" / "overlays" / "mine.toml", 'name = "mine"\n[config]\noptimizer.lrr = 1\n')
    write(
        home / "recipes" / "my-sft.toml",
        'name = "my-sft"\nextends = "qwen35-vl-sft"\n\n[config]\nmodel.tensor_parallel = 2\n',
    )
    words = ["dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"]
    r = cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--overlay", "mine", *words, "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert re.search(
        r"mine\.toml:3: overlay 'mine': unknown config key 'optimizer\.lrr'; did you mean 'optimizer\.lr'", r.err
    ), r.err
    assert "optimizer.lrr" not in r.out
    r = cli("submit", "my-sft", "-c", "gb200-32", *words, "--dry-run")
    assert r.code == 2 and re.search(
        r"my-sft\.toml:5: recipe 'my-sft': unknown config key 'model\.tensor_parallel'", r.err
    ), r.err
    r = cli("submit", "smoke", "--overlay", "mine", "--dry-run")  # on the smoke workload too
    assert r.code == 2 and "unknown config key 'optimizer.lrr'" in r.err
    # the smoke workload's own knobs are the job's keys: no '+' needed, and a typo in one is caught
    r = cli("submit", "smoke", "smoke.fail_at_step=3", "--dry-run", "-o", "json")
    assert r.code == 0 and r.json()["config"]["smoke.fail_at_step"] == 3, r.err
    assert cli("submit", "smoke", "+smoke.fail_at_step=3", "--dry-run").code == 0
    r = cli("submit", "smoke", "smoke.fail_at_stp=3", "--dry-run")
    assert r.code == 2 and "did you mean 'smoke.fail_at_step'" in r.err, r.err


def test_errors_offer_only_recipes_that_load_and_a_typo_in_status_recipe_is_caught(cli, home):
    write(home / "recipes" / "mine.toml", 'name = "mine"\nextends = "smok"\n')
    r = cli("submit", "mine", "--dry-run")
    assert r.code == 2 and "mine.toml:2: extends unknown recipe 'smok'; did you mean 'smoke'?" in r.err, r.err
    assert "valid: mine" not in r.err and "qwen35-vl-sft-common" in r.err  # not itself; a base may be extended
    r = cli("submit", "nope", "--dry-run")
    assert r.code == 2 and "'mine'" not in r.err and "smoke" in r.err, r.err
    r = cli("status", "--recipe", "smok")
    assert r.code == 2 and "--recipe: unknown recipe 'smok'; did you mean 'smoke'?" in r.err, r.out + r.err
    r = cli("status", "--recipe", "smoke")  # a known recipe with no runs yet: an empty table, no error
    assert r.code == 0 and r.out.startswith("RUN")
    r = cli("image", "import", "nvcr.io/nvidia/nemo:25.09", "-c", "local")
    assert r.code == 2 and r.err.startswith("bridge-launch: error: image import runs enroot"), r.err
