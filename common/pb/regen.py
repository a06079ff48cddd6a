"""Regenerate the protobuf/gRPC modules of common/pb from proto/*.proto.

    python -m common.pb.regen [--out DIR]

protoc writes sibling imports as `import pump_pb2`; they are rewritten to
`from common.pb import pump_pb2` so the modules work inside the package.
The registered proto file names stay `binlog.proto`, `pump.proto`, ... as in
the original tipb.

protoc comes from grpcio-tools, a package of the dev extra (`pip install 'tidb-binlog-py[dev]'`);
without it the command fails with one line naming that extra, exit status 1.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from common.cli import MissingExtraError, fail, import_extra

PROG = "common.pb.regen"
ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
PB_DIR = Path(__file__).resolve().parent
PROTOS = (
    "binlog.proto",
    "pump.proto",
    "cistern.proto",
    "secondary_binlog.proto",
    "pb_binlog.proto",
    "pd.proto",
)
_SIBLING_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Generate every module into out_dir and return the files written.

    MissingExtraError when grpcio-tools (the dev extra) is not installed.
    """
    protoc = import_extra("grpc_tools.protoc", "grpcio-tools", "dev")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO_DIR / name),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {name}")
    written = sorted(p for p in out_dir.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")))
    for path in written:
        text = path.read_text()
        fixed = _SIBLING_IMPORT.sub(r"from common.pb import \1 as \2", text)
        if fixed != text:
            path.write_text(fixed)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=PB_DIR, help="output directory (default: common/pb)")
    args = parser.parse_args(argv)
    try:
        written = generate(args.out)
    except MissingExtraError as exc:
        return fail(PROG, str(exc), 1)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
