"""reparo's config: the original keys, defaults, environment and flags, and one clear error per bad input."""

from __future__ import annotations

import datetime as dt
import io
import textwrap
from pathlib import Path

import pytest

from common import tso
from common.errors import ConfigError
from common.filters import TableName
from tools.reparo import main
from tools.reparo.config import load_config, parse_args, parse_datetime

SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "reparo.toml"


pytestmark = pytest.mark.usefixtures("keep_root_logging")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "reparo.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_are_the_originals() -> None:
    cfg = load_config(flags={"data-dir": "d"})
    assert (cfg.dest_type, cfg.worker_count, cfg.txn_batch, cfg.safe_mode) == ("print", 16, 20, False)
    assert (cfg.start_ts, cfg.stop_ts) == (0, 0)
    assert (cfg.dest_db.host, cfg.dest_db.port, cfg.dest_db.user, cfg.dest_db.password) == (
        "127.0.0.1",
        3306,
        "root",
        "",
    )


def test_every_key_of_a_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        data-dir = "/var/pb"
        log-level = "debug"
        log-file = "r.log"
        start-tso = 100
        stop-tso = 200
        dest-type = "mysql"
        safe-mode = true
        worker-count = 4
        txn-batch = 7
        replicate-do-db = ["~^b.*", "s1"]
        replicate-ignore-db = ["junk"]
        [[replicate-do-table]]
        db-name = "test"
        tbl-name = "log"
        [[replicate-ignore-table]]
        db-name = "test"
        tbl-name = "~^tmp"
        [dest-db]
        host = "10.0.0.1"
        port = 3309
        user = "u"
        password = "p"
        """,
    )
    cfg = load_config(path)
    assert cfg.data_dir == "/var/pb"
    assert (cfg.log_level, cfg.log_file) == ("debug", "r.log")
    assert (cfg.start_ts, cfg.stop_ts) == (100, 200)
    assert (cfg.dest_type, cfg.safe_mode, cfg.worker_count, cfg.txn_batch) == ("mysql", True, 4, 7)
    assert cfg.replicate_do_db == ("~^b.*", "s1")
    assert cfg.replicate_ignore_db == ("junk",)
    assert cfg.replicate_do_table == (TableName("test", "log"),)
    assert cfg.replicate_ignore_table == (TableName("test", "~^tmp"),)
    assert (cfg.dest_db.host, cfg.dest_db.port, cfg.dest_db.user, cfg.dest_db.password) == ("10.0.0.1", 3309, "u", "p")


def test_the_sample_config_loads() -> None:
    cfg = load_config(SAMPLE)
    assert cfg.dest_type == "mysql"
    assert cfg.data_dir


def test_datetimes_are_local_time() -> None:
    cfg = load_config(
        flags={"data-dir": "d", "start-datetime": "2024-05-01 10:00:00", "stop-datetime": "2024-05-01 10:00:01"}
    )
    assert cfg.start_ts == tso.from_datetime(dt.datetime(2024, 5, 1, 10, 0, 0))
    assert cfg.stop_ts - cfg.start_ts == 1000 << 18
    assert parse_datetime("2006-01-02 15:04:05") == tso.compose(
        int(dt.datetime(2006, 1, 2, 15, 4, 5).timestamp() * 1000), 0
    )


def test_environment_in_the_originals_spelling_and_upper_case() -> None:
    cfg = load_config(env={"Reparo_DATA_DIR": "/a", "REPARO_WORKER_COUNT": "3", "Reparo_DEST_DB_PORT": "3310"})
    assert (cfg.data_dir, cfg.worker_count, cfg.dest_db.port) == ("/a", 3, 3310)


def test_flags_override_file_and_single_dash_spelling(tmp_path: Path) -> None:
    path = write(tmp_path, 'data-dir = "a"\nworker-count = 2\n')
    cfg, _ = parse_args(["-config", str(path), "-worker-count=5", "-L", "warn", "--dest-db.port", "3311"], env={})
    assert (cfg.data_dir, cfg.worker_count, cfg.log_level, cfg.dest_db.port) == ("a", 5, "warn", 3311)
    cfg, _ = parse_args(["-data-dir", "-5", "-c", "7", "-safe-mode"], env={})
    assert (cfg.data_dir, cfg.worker_count, cfg.safe_mode) == ("-5", 7, True)
    with pytest.raises(ConfigError, match="unknown flag -nonsense: the original's reparo has no such flag"):
        parse_args(["-data-dir", "d", "-nonsense"], env={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('data-dir = "d"\nfrobnicate = 1\n', "unknown key 'frobnicate'"),
        ('data-dir = "d"\ndest-typ = "mysql"\n', "unknown key 'dest-typ' (did you mean 'dest-type'?)"),
        ('data-dir = "d"\n[dest-db]\nhots = "x"\n', "unknown key 'dest-db.hots'"),
        ('data-dir = "d"\n[[replicate-do-table]]\ndb = "x"\n', "unknown key 'replicate-do-table[0].db'"),
        ('data-dir = "d"\ndest-type = "kafka"\n', "'dest-type': expected one of 'print', 'mysql'"),
        ('data-dir = "d"\nworker-count = 0\n', "'worker-count': must be >= 1"),
        ('data-dir = "d"\ntxn-batch = "x"\n', "'txn-batch': expected an integer"),
        ('data-dir = "d"\nstart-tso = -1\n', "'start-tso': must be >= 0"),
        ('data-dir = "d"\nstart-datetime = "2024/05/01"\n', "'start-datetime': expected a local time like"),
        ('data-dir = "d"\nstart-tso = 5\nstart-datetime = "2024-05-01 10:00:00"\n', "'start-datetime' or 'start-tso'"),
        ('data-dir = "d"\nstart-tso = 9\nstop-tso = 5\n', "the window ends before it starts"),
        ('data-dir = "d"\nreplicate-do-db = ["~("]\n', "bad regular expression"),
        ('data-dir = "d"\n[dest-db]\nport = 70000\n', "'dest-db.port': must be a port number"),
        ("log-level = 'info'\n", "'data-dir' is required"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_main_exits_2_with_one_line_for_an_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, f'data-dir = "{tmp_path}"\nbogus = true\n')
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(path)], out=out)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("reparo: config error:")
    assert "unknown key 'bogus'" in err
    assert out.getvalue() == ""


def test_print_config(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["--data-dir", str(tmp_path), "--print-config"], out=out) == 0
    text = out.getvalue()
    assert f'data-dir = "{tmp_path}"' in text
    assert "[dest-db]" in text
