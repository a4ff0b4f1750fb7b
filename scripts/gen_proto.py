#!/usr/bin/env python3
"""Generate the protobuf/gRPC Python code committed next to the .proto files.

The generated code is committed so that ``pip install``, IDEs, mypy and Spark executors need no
code-generation step. ``--check`` regenerates into a temporary directory and fails if the
committed files differ (CI runs it), so a .proto change can never land without its code.

Generation is pinned to one grpcio-tools version: generated code embeds the version it was made
with and refuses to import under an older runtime.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GRPCIO_TOOLS_VERSION = "1.85.1"
ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("bkproto/**/*.proto"))


def generate(out_dir: Path) -> None:
    try:
        from importlib.metadata import version

        installed = version("grpcio-tools")
    except Exception:  # noqa: BLE001 - any lookup failure means "not installed"
        sys.exit("grpcio-tools is not installed: pip install grpcio-tools==" + GRPCIO_TOOLS_VERSION)
    if installed != GRPCIO_TOOLS_VERSION:
        sys.exit(f"grpcio-tools {installed} is installed; generation is pinned to {GRPCIO_TOOLS_VERSION}")
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    cmd = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *files,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)


def generated_files(base: Path) -> set[Path]:
    return {
        p.relative_to(base)
        for p in base.glob("bkproto/**/*")
        if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        fresh = generated_files(out)
        if args.check:
            committed = generated_files(PROTO_ROOT)
            stale = sorted(
                str(p) for p in fresh | committed
                if p not in fresh or p not in committed
                or not filecmp.cmp(out / p, PROTO_ROOT / p, shallow=False)
            )
            if stale:
                print("generated protobuf code is stale; run scripts/gen_proto.py:", *stale, sep="\n  ")
                return 1
            print(f"generated protobuf code is up to date ({len(fresh)} files)")
            return 0
        for rel in sorted(fresh):
            shutil.copyfile(out / rel, PROTO_ROOT / rel)
            print("wrote", PROTO_ROOT / rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
