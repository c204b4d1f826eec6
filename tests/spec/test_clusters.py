import pytest

from conftest import run_cli, write


@pytest.mark.usefixtures("home")
def test_nodes_on_a_profile_named_for_its_size_says_what_size_it_gives():
    d = run_cli("submit", "smoke", "-c", "gb200-32", "--nodes", "4", "--dry-run", "-o", "json").json()
    assert d["world_size"] == 16
    assert any("fixed size of 8 nodes (32 GPUs); --nodes 4 runs on 4 nodes (16 GPUs)" in w for w in d["warnings"])
    assert run_cli("submit", "smoke", "-c", "gb200-32", "--dry-run", "-o", "json").json()["warnings"] == []


def test_clusters_show_and_list(cli, home):
    r = cli("clusters", "show", "gb200-8")
    assert "[slurm]" in r.out and "[lepton]" not in r.out and "[dgxcloud]" not in r.out
    assert "account = \n" not in r.out + "\n"  # unset values are not printed
    r = cli("clusters", "show", "lepton-gb200")
    assert "[lepton]" in r.out and "[slurm]" not in r.out
    write(home / "clusters" / "mine.toml", 'name = "mine"\nextends = "local"\n')
    rows = {line.split()[0]: line.split() for line in cli("clusters", "list").out.splitlines()[1:]}
    assert "user" in rows["mine"] and "shipped" in rows["local"]
    assert {c["name"]: c["origin"] for c in cli("clusters", "list", "-o", "json").json()}["mine"] == "user"
