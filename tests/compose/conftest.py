"""Fixtures of the compose tier (`make compose-test`; `make test` does not collect tests/compose).

- `podman_engine`: podman works here (installed with apt-get first where it is missing and this is root
  on Debian); otherwise the test skips with the reason, or fails under CI=true.
- `compose_images`: the images of docker-compose.yml exist (deploy/container/build-images.sh
  --if-missing builds the missing ones, the base from Debian's packages where no registry answers).
- `compose_cluster`: a ComposeCluster under its own project name, with nothing of that project left
  from an earlier run; at the end (also on failure) the containers' logs are printed if the test failed,
  and `down -v` plus a forced removal leave no container, volume or network of the project.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose.cluster import ComposeCluster
from tests.compose.engine import CI, ROOT, compose_command, engine_env, engine_problem, podman, tail

PROJECT = "tidb-binlog-ctest"
PASSWORD = "ctest-pw'1"  # a quote in it: the image's init SQL must escape it


def unavailable(reason: str) -> None:
    if CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def podman_engine() -> str:
    """The engine command ("podman"), usable with tests.compose.engine.podman()."""
    problem = engine_problem()
    if problem:
        unavailable(f"no container engine: {problem}")
    return "podman"


@pytest.fixture(scope="session")
def compose_images(podman_engine: str) -> list[str]:
    images = ["tidb-binlog-py:latest", "tidb-binlog-mariadb:latest"]
    build_missing(images, CONTAINER_ENGINE=podman_engine)
    return images


def build_missing(images: list[str], **env: str) -> None:
    """deploy/container/build-images.sh --if-missing with `env` (IMAGE, EXTRAS, ...) unless every image of
    `images` exists; the test fails with the build's output if it does."""
    if all(podman("image", "exists", image, check=False).returncode == 0 for image in images):
        return
    done = subprocess.run(
        [str(ROOT / "deploy" / "container" / "build-images.sh"), "--if-missing"],
        env=engine_env(**env),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"building {images} failed (exit {done.returncode}):\n{tail(done.stdout + done.stderr, 6000)}")


@pytest.fixture
def compose_cluster(
    compose_images: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ComposeCluster]:
    if compose_command() is None:
        unavailable("podman-compose is not installed (make compose-test installs the compose extra)")
    cluster = ComposeCluster(PROJECT, PASSWORD, tmp_path / "podman-compose.log")
    if any(cluster.leftovers().values()):
        cluster.force_remove()
    try:
        yield cluster
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            print(f"\n{cluster.logs()}")
            if cluster.log_path.exists():
                print(f"===== podman-compose =====\n{tail(cluster.log_path.read_text(), 8000)}")
        if any(cluster.leftovers().values()):
            try:
                cluster.down()
            finally:
                cluster.force_remove()
        left = {kind: names for kind, names in cluster.leftovers().items() if names}
        assert not left, f"left behind: {left}"
        assert podman("ps", "-a", "--filter", cluster.label(), "-q", check=False).stdout.strip() == ""
