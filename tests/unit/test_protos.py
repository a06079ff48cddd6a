"""The checked-in generated modules match the protos, and the wire names are the original ones."""

from __future__ import annotations

from pathlib import Path

from common.pb import binlog_pb2, cistern_pb2, pb_binlog_pb2, pump_pb2, regen, secondary_binlog_pb2


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    written = regen.generate(tmp_path)
    assert written, "protoc wrote nothing"
    stale = []
    for path in written:
        checked_in = regen.PB_DIR / path.name
        if not checked_in.exists() or checked_in.read_bytes() != path.read_bytes():
            stale.append(path.name)
    assert not stale, f"common/pb is stale, run `make proto`: {stale}"
    generated = {p.name for p in regen.PB_DIR.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))}
    leftovers = generated - {p.name for p in written}
    assert not leftovers, f"generated modules without a .proto: {sorted(leftovers)}"


def test_registered_file_and_package_names() -> None:
    assert binlog_pb2.DESCRIPTOR.name == "binlog.proto"
    assert binlog_pb2.DESCRIPTOR.package == "binlog"
    assert pump_pb2.DESCRIPTOR.name == "pump.proto"
    assert cistern_pb2.DESCRIPTOR.name == "cistern.proto"
    assert secondary_binlog_pb2.DESCRIPTOR.package == "slave.binlog"
    assert pb_binlog_pb2.DESCRIPTOR.package == "pb_binlog"


def test_service_method_paths() -> None:
    pump = pump_pb2.DESCRIPTOR.services_by_name["Pump"]
    assert pump.full_name == "binlog.Pump"
    assert {m.name for m in pump.methods} == {"WriteBinlog", "PullBinlogs"}
    assert pump.methods_by_name["PullBinlogs"].server_streaming
    assert not pump.methods_by_name["WriteBinlog"].server_streaming
    cistern = cistern_pb2.DESCRIPTOR.services_by_name["Cistern"]
    assert cistern.full_name == "binlog.Cistern"
    assert {m.name for m in cistern.methods} == {"DumpBinlog", "DumpDDLJobs", "Notify"}


def _fields(message: type) -> list[tuple[str, int, int, bool]]:
    desc = message.DESCRIPTOR  # type: ignore[attr-defined]
    return [(f.name, f.number, f.type, f.is_repeated) for f in desc.fields]


def test_binlog_field_numbers_and_types() -> None:
    from google.protobuf.descriptor import FieldDescriptor as F

    assert _fields(binlog_pb2.Binlog) == [
        ("tp", 1, F.TYPE_ENUM, False),
        ("start_ts", 2, F.TYPE_INT64, False),
        ("commit_ts", 3, F.TYPE_INT64, False),
        ("prewrite_key", 4, F.TYPE_BYTES, False),
        ("prewrite_value", 5, F.TYPE_BYTES, False),
        ("ddl_query", 6, F.TYPE_BYTES, False),
        ("ddl_job_id", 7, F.TYPE_INT64, False),
        ("ddl_schema_state", 8, F.TYPE_INT32, False),
    ]
    assert _fields(binlog_pb2.TableMutation) == [
        ("table_id", 1, F.TYPE_INT64, False),
        ("inserted_rows", 2, F.TYPE_BYTES, True),
        ("updated_rows", 3, F.TYPE_BYTES, True),
        ("deleted_ids", 4, F.TYPE_INT64, True),
        ("deleted_pks", 5, F.TYPE_BYTES, True),
        ("deleted_rows", 6, F.TYPE_BYTES, True),
        ("sequence", 7, F.TYPE_ENUM, True),
    ]
    assert _fields(pump_pb2.Entity) == [
        ("pos", 1, F.TYPE_MESSAGE, False),
        ("payload", 2, F.TYPE_BYTES, False),
        ("checksum", 3, F.TYPE_BYTES, False),
        ("meta", 4, F.TYPE_MESSAGE, False),
    ]
    assert dict(binlog_pb2.BinlogType.items()) == {
        "Prewrite": 0, "Commit": 1, "Rollback": 2, "PreDDL": 3, "PostDDL": 4
    }  # fmt: skip
    assert dict(binlog_pb2.MutationType.items()) == {
        "Insert": 0, "Update": 1, "DeleteID": 2, "DeletePK": 3, "DeleteRow": 4
    }  # fmt: skip


def test_secondary_and_pb_binlog_golden_bytes() -> None:
    # docs/formats.md#relay-records example
    b = secondary_binlog_pb2.Binlog(type=secondary_binlog_pb2.DML, commit_ts=10)
    table = b.dml_data.tables.add(schema_name="test", table_name="t")
    table.column_info.add(name="id", mysql_type="bigint", is_primary_key=True, flen=20, decimal=0)
    m = table.mutations.add(type=secondary_binlog_pb2.Insert)
    m.row.columns.add(int64_value=1)
    assert b.SerializeToString().hex(" ") == (
        "08 00 10 0a 1a 29 0a 27 0a 04 74 65 73 74 12 01 74 1a 12 0a 02 69 64 12 06 62 69 67 69 6e 74 "
        "18 01 20 14 28 00 22 08 08 00 12 04 0a 02 10 01"
    )
    # docs/formats.md#pb-binlog-files examples
    col = pb_binlog_pb2.column(name="id", tp=b"\x08", mysql_type="bigint", value=b"\x08\x02")
    assert col.SerializeToString().hex(" ") == "0a 02 69 64 12 01 08 1a 06 62 69 67 69 6e 74 22 02 08 02"
    ddl = pb_binlog_pb2.Binlog(tp=pb_binlog_pb2.DDL, commit_ts=5, ddl_query=b"create database a;")
    assert ddl.SerializeToString().hex(" ") == (
        "08 01 10 05 22 12 63 72 65 61 74 65 20 64 61 74 61 62 61 73 65 20 61 3b"
    )
