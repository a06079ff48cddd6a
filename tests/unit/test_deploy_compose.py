"""docker-compose.yml, checked without a container engine (none runs here or in CI).

- the file validates against the compose specification's JSON schema (shipped by check-jsonschema);
- every depends_on names a service that has a health check, and the start order has no cycle;
- every service has a health check; published host ports do not clash and stay on loopback;
- the default profile needs no registry: its services run the two images the Dockerfile builds (the
  project's, and its `mariadb` target); Prometheus and Grafana are in the `monitoring` profile, the Spark
  standalone master and worker (our image, with the spark extra) in the `spark` profile;
- every config file it bind-mounts (read-only, from deploy/) exists, every named volume is declared;
- every service on our image runs one of the image's commands (deploy/docker/entrypoint.py) with flags that
  command accepts, loaded through the command's own config loader with the mounted deploy/compose/*.toml;
- the addresses hang together: nodes advertise their compose names, ports match their configs, pumps and
  the writer share the upstream store, Prometheus scrapes every pump and the drainer, Grafana is provisioned
  with the dashboard and the Prometheus data source; the Spark worker joins the master's URL and both
  health checks probe the web UI ports the services are given.
"""

from __future__ import annotations

import graphlib
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from common.config import ArgumentParser, add_flags, load_args
from drainer.config import DrainerConfig
from drainer.config import parse_args as drainer_args
from pd.config import PDConfig
from pd.main import ENV_PREFIX as PD_ENV_PREFIX
from pump.config import PumpConfig
from pump.config import parse_args as pump_args
from upstream.workload_cli import parse_args as workload_args

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
OUR_IMAGE = "tidb-binlog-py:latest"
MARIADB_IMAGE = "tidb-binlog-mariadb:latest"
PUMPS = ("pump1", "pump2", "pump3")
SPARK = {"spark-master", "spark-worker"}
SPARK_IMAGE = "${SPARK_IMAGE:-tidb-binlog-py:latest}"
"""Our image by default; one built with the spark extra (a JRE and pyspark) when SPARK_IMAGE names it."""
SERVICES = {"etcd", "pd-server", *PUMPS, "drainer", "writer", "mariadb", "prometheus", "grafana", *SPARK}
MONITORING = {"prometheus", "grafana"}
PROFILES = {**dict.fromkeys(MONITORING, "monitoring"), **dict.fromkeys(SPARK, "spark")}
"""Services that a plain `up` does not start, and the profile that does."""
Service = dict[str, Any]


def load_script(name: str) -> ModuleType:
    """A deploy/docker script as a module (they are installed as commands in the image, not packages)."""
    spec = importlib.util.spec_from_file_location(f"deploy_docker_{name}", ROOT / "deploy" / "docker" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, Service]:
    found: dict[str, Service] = compose()["services"]
    return found


def ours(name: str) -> bool:
    """Runs our image (the Spark services: the one SPARK_IMAGE names, by default ours)."""
    return services()[name].get("image") in (OUR_IMAGE, SPARK_IMAGE)


def mounts(service: Service) -> list[tuple[str, str, str]]:
    """(source, target, mode) of a service's short-syntax volumes; mode is "" or e.g. "ro"."""
    out = []
    for spec in service.get("volumes", []):
        source, target, *mode = str(spec).split(":")
        assert len(mode) <= 1, f"{spec!r}: SOURCE:TARGET[:MODE]"
        out.append((source, target, mode[0] if mode else ""))
    return out


def named_volumes(service: Service) -> dict[str, str]:
    """target -> named volume of a service."""
    return {target: source for source, target, _ in mounts(service) if not source.startswith((".", "/"))}


def mounted_config(service: Service, target: str) -> Path:
    """The repo file a service sees at `target` through a read-only bind mount."""
    for source, mounted_at, _ in mounts(service):
        if mounted_at == target and source.startswith("./"):
            return ROOT / source
    raise AssertionError(f"nothing is mounted at {target}")


def with_repo_configs(service: Service, argv: list[str]) -> list[str]:
    """argv with every `--config <container path>` pointing at the repo file mounted there."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--config":
            out[i + 1] = str(mounted_config(service, out[i + 1]))
    return out


def pump_config(name: str) -> PumpConfig:
    service = services()[name]
    return pump_args(with_repo_configs(service, service["command"][1:]), env={})[0]


def drainer_config() -> DrainerConfig:
    service = services()["drainer"]
    return drainer_args(with_repo_configs(service, service["command"][1:]), env={})[0]


def pd_config() -> PDConfig:
    service = services()["pd-server"]
    parser = ArgumentParser(prog="pd-server")
    add_flags(parser, PDConfig, env_prefix=PD_ENV_PREFIX)
    args = parser.parse_args(with_repo_configs(service, service["command"][1:]))
    return load_args(PDConfig, args, env={}, env_prefix=PD_ENV_PREFIX)


def port_of(addr: str) -> int:
    return int(addr.rpartition(":")[2])


def host_of(addr: str) -> str:
    return addr.rpartition(":")[0]


# ------------------------------------------------------------------------------- the specification


def check_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_compose_file_matches_the_compose_specification() -> None:
    done = check_schema(COMPOSE_FILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_catches_a_misspelt_key(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("stop_grace_period: 90s", "stop_grace_perod: 90s"))
    done = check_schema(broken)
    assert done.returncode != 0
    assert "stop_grace_perod" in done.stdout


# --------------------------------------------------------------------------------------- structure


def test_the_cluster_has_every_service() -> None:
    assert set(services()) == SERVICES
    assert {name for name in SERVICES if ours(name)} == {"etcd", "pd-server", *PUMPS, "drainer", "writer", *SPARK}
    for name in MONITORING:
        image = services()[name]["image"]
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image), f"{name}: {image} has no tag"
        assert not image.endswith(":latest"), f"{name}: pin a version, not {image}"


def dockerfile_stages() -> set[str]:
    return set(re.findall(r"^FROM \S+ AS (\w+)$", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE))


def test_the_default_profile_runs_only_images_built_here() -> None:
    """A plain `up` pulls nothing: Prometheus and Grafana (registry images) are behind --profile monitoring;
    Spark (our image, but built with the spark extra and a JRE) is behind --profile spark."""
    for name, service in services().items():
        if name in PROFILES:
            assert service["profiles"] == [PROFILES[name]], name
        else:
            assert "profiles" not in service, f"{name} must start with a plain `up`"
        if name in MONITORING:
            assert "build" not in service
            continue
        build = service["build"]
        assert (build["context"], build["dockerfile"]) == (".", "Dockerfile")
        assert build["target"] in dockerfile_stages()
        expected = {OUR_IMAGE: "runtime", MARIADB_IMAGE: "mariadb", SPARK_IMAGE: "runtime"}
        assert (service["image"] == SPARK_IMAGE) == (name in SPARK), f"{name}: {service['image']}"
        assert build["target"] == expected[service["image"]], f"{name}: {service['image']} from {build['target']}"
    # nothing the default profile starts waits for a service it does not start
    for name, service in services().items():
        if name not in PROFILES:
            assert not set(service.get("depends_on", {})) & set(PROFILES)
    header = COMPOSE_FILE.read_text().split("\nname:")[0]
    for profile in set(PROFILES.values()):
        assert f"--profile {profile}" in header, f"the header tells about the profile {profile}"


def test_mariadb_is_the_dockerfile_target_with_its_own_health_check() -> None:
    mariadb = services()["mariadb"]
    assert mariadb["image"] == MARIADB_IMAGE
    assert mariadb["healthcheck"]["test"] == ["CMD", "mariadb-healthcheck"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY deploy/docker/mariadb-healthcheck.sh /usr/local/bin/mariadb-healthcheck" in dockerfile
    assert "MARIADB_ROOT_PASSWORD" in mariadb["environment"]
    password = mariadb["environment"]["MARIADB_ROOT_PASSWORD"]
    assert services()["drainer"]["environment"]["DRAINER_SYNCER_TO_PASSWORD"] == password
    assert named_volumes(mariadb) == {"/var/lib/mysql": "mariadb-data"}
    assert "127.0.0.1:13306:3306" in mariadb["ports"]


def test_depends_on_names_services_with_health_checks_and_has_no_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for name, service in services().items():
        deps = service.get("depends_on", {})
        assert isinstance(deps, dict), f"{name}: depends_on as a mapping with conditions"
        for dep, spec in deps.items():
            assert dep in services(), f"{name} depends on unknown service {dep!r}"
            assert spec["condition"] == "service_healthy", f"{name} -> {dep}"
            assert "healthcheck" in services()[dep], f"{name} waits for {dep}, which has no health check"
        graph[name] = set(deps)
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    assert order.index("etcd") < order.index("pd-server") < min(order.index(p) for p in PUMPS)
    assert max(order.index(p) for p in PUMPS) < order.index("drainer") < order.index("writer")
    assert order.index("mariadb") < order.index("drainer")
    assert order.index("prometheus") < order.index("grafana")
    assert order.index("spark-master") < order.index("spark-worker")


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_health_check(name: str) -> None:
    check = services()[name]["healthcheck"]
    assert not check.get("disable", False)
    assert check["test"][0] == "CMD", f"{name}: exec form, no shell needed in the image"
    assert len(check["test"]) >= 2
    assert {"interval", "timeout", "retries"} <= check.keys()


def test_published_ports_do_not_clash_and_stay_on_loopback() -> None:
    seen: dict[int, str] = {}
    for name, service in services().items():
        for spec in service.get("ports", []):
            parts = str(spec).split(":")
            assert len(parts) == 3, f"{name}: publish as 127.0.0.1:HOST:CONTAINER, got {spec!r}"
            ip, host, _ = parts
            assert ip == "127.0.0.1", f"{name}: {spec!r} would listen on every interface"
            assert int(host) not in seen, f"host port {host} used by {seen.get(int(host))} and {name}"
            seen[int(host)] = name
    assert 3306 not in seen  # a local MariaDB / MySQL may hold it


def test_config_files_exist_and_every_mount_is_declared() -> None:
    declared_volumes = set(compose()["volumes"])
    used_volumes: set[str] = set()
    assert "configs" not in compose(), "podman-compose ignores configs: bind-mount the files read-only"
    for name, service in services().items():
        assert "configs" not in service, name
        for source, target, mode in mounts(service):
            assert target.startswith("/"), f"{name}: {target!r}"
            if source.startswith((".", "/")):
                assert source.startswith("./deploy/"), f"{name}: mount files from deploy/, not {source!r}"
                assert (ROOT / source).is_file(), f"{name}: {source} is missing"
                assert mode == "ro", f"{name}: mount {source} read-only"
            else:
                assert source in declared_volumes, f"{name}: volume {source!r} is not declared"
                assert mode == "", f"{name}: {source}:{target}:{mode}"
                used_volumes.add(source)
    assert used_volumes == declared_volumes


# ------------------------------------------------------------------------------ commands and flags


@pytest.mark.parametrize("name", ["etcd", "pd-server", *PUMPS, "drainer", "writer"])
def test_our_services_run_an_image_command(name: str) -> None:
    command = services()[name]["command"]
    assert isinstance(command, list), f"{name}: exec form"
    assert command[0] in load_script("entrypoint").commands()
    test = services()[name]["healthcheck"]["test"]
    assert test[1] in load_script("entrypoint").commands()
    if test[1] == "healthcheck":
        load_script("healthcheck").build_parser().parse_args(test[2:])  # exits 2 on a bad probe


def spark_flags(name: str) -> tuple[str, dict[str, str], list[str]]:
    """(main class, --flag value pairs, positional arguments) of a Spark service's command."""
    main_class, *rest = services()[name]["command"]
    flags: dict[str, str] = {}
    positional: list[str] = []
    args = iter(rest)
    for arg in args:
        if arg.startswith("--"):
            flags[arg] = next(args)
        else:
            positional.append(arg)
    return main_class, flags, positional


@pytest.mark.parametrize("name", sorted(SPARK))
def test_spark_services_run_spark_class_from_the_image(name: str) -> None:
    """The image's entry point runs only its own commands: the Spark services replace it with the
    launcher the pyspark wheel installs next to them (in the venv's bin/, on the image's PATH)."""
    service = services()[name]
    assert service["entrypoint"] == ["spark-class"]
    assert (Path(sys.executable).parent / "spark-class").is_file(), "the spark extra installs spark-class"
    assert isinstance(service["command"], list), f"{name}: exec form"
    test = service["healthcheck"]["test"]
    assert test[1] == "healthcheck"
    load_script("healthcheck").build_parser().parse_args(test[2:])  # exits 2 on a bad probe


def test_the_spark_worker_joins_the_master_and_the_probes_hit_the_web_uis() -> None:
    master_class, master, master_args = spark_flags("spark-master")
    worker_class, worker, worker_args = spark_flags("spark-worker")
    assert master_class == "org.apache.spark.deploy.master.Master"
    assert worker_class == "org.apache.spark.deploy.worker.Worker"
    assert master_args == []
    assert master["--host"] == "spark-master"  # the name the master answers to: the workers' URL says it
    assert worker_args == [f"spark://spark-master:{master['--port']}"]
    for name, flags in (("spark-master", master), ("spark-worker", worker)):
        probe = services()[name]["healthcheck"]["test"][2:]
        assert probe == ["http", f"http://127.0.0.1:{flags['--webui-port']}/json/"], name
    assert f"127.0.0.1:18080:{master['--webui-port']}" in services()["spark-master"]["ports"]
    assert worker["--work-dir"].startswith("/tmp/"), "the image's user cannot write SPARK_HOME/work"
    assert int(worker["--cores"]) >= 1
    assert re.fullmatch(r"\d+[mg]", worker["--memory"])


def test_image_commands_are_the_console_scripts_plus_etcd_and_healthcheck() -> None:
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    assert set(load_script("entrypoint").commands()) == scripts | {"etcd", "etcdctl", "etcdutl", "healthcheck"}


def test_daemon_flags_and_mounted_configs_load() -> None:
    for name in PUMPS:
        cfg = pump_config(name)
        assert cfg.node_id == name
        assert cfg.advertise == f"{name}:{port_of(cfg.addr)}"
    drainer = drainer_config()
    assert drainer.advertise == f"drainer:{port_of(drainer.addr)}"
    assert drainer.syncer.db_type == "mysql"
    assert drainer.syncer.to.host == "mariadb"
    pd = pd_config()
    assert pd.advertise_addr == f"pd-server:{port_of(pd.addr)}"


def test_everything_finds_etcd_at_its_advertised_url() -> None:
    etcd_flags = dict(arg.split("=", 1) for arg in services()["etcd"]["command"][1:])
    url = etcd_flags["--advertise-client-urls"]
    assert urlsplit(url).hostname == "etcd"
    assert port_of(etcd_flags["--listen-client-urls"]) == urlsplit(url).port
    assert {pump_config(p).pd_urls for p in PUMPS} == {url}
    assert drainer_config().pd_urls == url
    assert pd_config().pd_urls == url
    args, _ = workload_args(services()["writer"]["command"][1:])
    assert args.etcd == url


def test_etcd_flags_are_etcd_flags() -> None:
    help_text = subprocess.run(
        [str(Path(sys.executable).parent / "etcd"), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    known = set(re.findall(r"--[a-z][a-z0-9-]+", help_text.stdout + help_text.stderr))
    used = {arg.split("=", 1)[0] for arg in services()["etcd"]["command"][1:]}
    assert used <= known, f"unknown etcd flags: {used - known}"
    assert "/var/lib/tidb-binlog/etcd" in named_volumes(services()["etcd"])


def test_health_checks_probe_the_ports_the_services_listen_on() -> None:
    def probe(name: str) -> list[str]:
        test: list[str] = services()[name]["healthcheck"]["test"]
        return test[1:]

    for name in PUMPS:
        assert probe(name) == [
            "healthcheck",
            "http",
            f"http://127.0.0.1:{port_of(pump_config(name).status_addr)}/status",
        ]
    drainer = drainer_config()
    assert probe("drainer") == ["healthcheck", "http", f"http://127.0.0.1:{port_of(drainer.status_addr)}/status"]
    assert probe("pd-server") == ["healthcheck", "pd", f"127.0.0.1:{port_of(pd_config().addr)}"]


def test_published_node_ports_are_their_status_ports() -> None:
    for name in [*PUMPS, "drainer"]:
        cfg = pump_config(name) if name in PUMPS else drainer_config()
        for spec in services()[name]["ports"]:
            assert int(str(spec).rsplit(":", 1)[1]) == port_of(cfg.status_addr)
        assert host_of(cfg.status_addr) == "0.0.0.0"  # reachable from the host and from prometheus


def test_node_data_lives_in_its_own_named_volume() -> None:
    owners: dict[str, str] = {}
    for name in [*PUMPS, "drainer"]:
        data_dir = str(pump_config(name).data_dir if name in PUMPS else drainer_config().data_dir)
        volumes = named_volumes(services()[name])
        assert data_dir in volumes, f"{name}: data-dir {data_dir} is not on a volume"
        assert volumes[data_dir] not in owners, (
            f"{name} shares {volumes[data_dir]} with {owners.get(volumes[data_dir])}"
        )
        owners[volumes[data_dir]] = name


def test_pumps_read_the_txn_status_of_the_store_the_writer_writes() -> None:
    args, _ = workload_args(services()["writer"]["command"][1:])
    store = args.store
    writer_volumes = named_volumes(services()["writer"])
    for name in PUMPS:
        dsn = pump_config(name).upstream.txn_status_dsn
        assert dsn == store
        path = dsn.removeprefix("sqlite://")
        pump_volumes = named_volumes(services()[name])
        shared = {target for target in pump_volumes if path.startswith(target + "/")}
        assert shared, f"{name}: {path} is on no volume"
        assert all(writer_volumes.get(t) == pump_volumes[t] for t in shared)


def test_writer_health_check_watches_its_store() -> None:
    args, _ = workload_args(services()["writer"]["command"][1:])
    test = services()["writer"]["healthcheck"]["test"]
    assert test[1:4] == ["healthcheck", "fresh", args.store.removeprefix("sqlite://")]


# ------------------------------------------------------------------------------ prometheus, grafana


def test_prometheus_scrapes_every_pump_and_the_drainer_and_loads_the_rules() -> None:
    prometheus = services()["prometheus"]
    config_file = mounted_config(prometheus, "/etc/prometheus/prometheus.yml")
    scrape = yaml.safe_load(config_file.read_text())
    targets = {
        job["job_name"]: {t for sc in job["static_configs"] for t in sc["targets"]} for job in scrape["scrape_configs"]
    }
    assert targets["pump"] == {f"{p}:{port_of(pump_config(p).status_addr)}" for p in PUMPS}
    assert targets["drainer"] == {f"drainer:{port_of(drainer_config().status_addr)}"}
    for rules in scrape["rule_files"]:
        rule_file = mounted_config(prometheus, rules)
        assert yaml.safe_load(rule_file.read_text())["groups"]


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    grafana = services()["grafana"]
    sources = yaml.safe_load(
        mounted_config(grafana, "/etc/grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert len(sources) == 1
    assert sources[0]["type"] == "prometheus"
    assert sources[0]["isDefault"] is True
    assert urlsplit(sources[0]["url"]).hostname == "prometheus"
    assert urlsplit(sources[0]["url"]).port == 9090
    assert "127.0.0.1:9090:9090" in services()["prometheus"]["ports"]
    providers = yaml.safe_load(
        mounted_config(grafana, "/etc/grafana/provisioning/dashboards/tidb-binlog.yml").read_text()
    )["providers"]
    folder = providers[0]["options"]["path"]
    dashboard = mounted_config(grafana, f"{folder}/tidb-binlog.json")
    assert dashboard == ROOT / "deploy" / "grafana" / "tidb-binlog.json"
    board = json.loads(dashboard.read_text())
    # provisioning does not fill __inputs: the panels' ${DS_PROMETHEUS} must be a datasource variable
    variables = {v["name"]: v for v in board["templating"]["list"]}
    uses = set(re.findall(r'"uid": "\$\{(\w+)\}"', json.dumps(board)))
    assert uses
    for name in uses:
        assert variables[name]["type"] == "datasource"
        assert variables[name]["query"] == "prometheus"
