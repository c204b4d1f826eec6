import pytest

from bridge_launch.core import image_ref
from bridge_launch.core.errors import UsageError
from conftest import run_cli


@pytest.mark.parametrize(
    "given,pyxis",
    [
        ("nvcr.io/nvidia/nemo:26.10", "nvcr.io#nvidia/nemo:26.10"),
        ("nvcr.io#nvidia/nemo:26.10", "nvcr.io#nvidia/nemo:26.10"),
        ("user@nvcr.io#nvidia/nemo:26.10", "user@nvcr.io#nvidia/nemo:26.10"),
        ("localhost:5000/team/img:1", "localhost:5000#team/img:1"),
        ("localhost/img", "localhost#img"),
        ("registry.example.com:443/a/b/c@sha256:" + "0" * 64, "registry.example.com:443#a/b/c@sha256:" + "0" * 64),
        ("ubuntu:22.04", "ubuntu:22.04"),  # Docker Hub names have no registry part
        ("nvidia/cuda:12.4.0-base", "nvidia/cuda:12.4.0-base"),
        ("/lustre/images/nemo.sqsh", "/lustre/images/nemo.sqsh"),
        ("./nemo.sqsh", "./nemo.sqsh"),
    ],
)
def test_pyxis_reference_forms(given, pyxis):
    assert image_ref.pyxis_ref(given) == pyxis
    assert image_ref.pyxis_ref(pyxis) == pyxis  # idempotent


@pytest.mark.parametrize(
    "given,docker",
    [
        ("nvcr.io#nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("user@nvcr.io#nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("nvcr.io/nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("nvcr.io/nvidia/nemo@sha256:" + "a" * 64, "nvcr.io/nvidia/nemo@sha256:" + "a" * 64),
    ],
)
def test_registry_reference_forms(given, docker):
    assert image_ref.docker_ref(given) == docker


@pytest.mark.usefixtures("home")
def test_a_bare_squashfs_name_is_refused_not_pulled():
    r = run_cli("submit", "smoke", "-c", "gb200-8", "--container", "nemo.sqsh", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "absolute path" in r.err, r.err
    with pytest.raises(UsageError):
        image_ref.docker_ref("/lustre/images/nemo.sqsh")
