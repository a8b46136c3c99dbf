"""Regenerate the egbe.v1 Python package (messages, gRPC stubs, mypy stubs) from protos/.

The package also carries the protocol's published JSON Schemas (protos/egbe/v1/schemas/, the reply
contract scripts/export_output_schemas.py writes), copied as they are into egbe/v1/schemas/.

Generated code is committed so a checkout imports without a build step; `--check` (run by CI)
regenerates into a temporary folder and fails if the committed files differ.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIR = Path("egbe") / "v1"


def generate(out_dir: Path) -> list[Path]:
    """Run protoc over every egbe/v1 proto into out_dir; return the generated files."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    # The mypy-protobuf plugins live beside the interpreter running this script.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for package in (out_dir / "egbe", out_dir / PACKAGE_DIR):
        init = package / "__init__.py"
        init.write_text('"""Generated egbe-protocol code; regenerate with scripts/gen_protos.py."""\n')
    schemas = out_dir / PACKAGE_DIR / "schemas"
    schemas.mkdir()
    for schema in sorted((PROTO_ROOT / PACKAGE_DIR / "schemas").glob("*.json")):
        shutil.copyfile(schema, schemas / schema.name)
    return sorted(p for p in (out_dir / "egbe").rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generated = generate(out)
        if args.check:
            stale = [
                str(p.relative_to(out))
                for p in generated
                if not (ROOT / p.relative_to(out)).exists()
                or not filecmp.cmp(p, ROOT / p.relative_to(out), shallow=False)
            ]
            committed = {
                p.relative_to(ROOT)
                for p in (ROOT / "egbe").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            }
            extra = sorted(str(p) for p in committed - {p.relative_to(out) for p in generated})
            if stale or extra:
                print("generated code is stale; run `make protos`:", *stale, *extra, sep="\n  ")
                return 1
            print("generated code is current")
            return 0
        shutil.rmtree(ROOT / "egbe", ignore_errors=True)
        shutil.copytree(out / "egbe", ROOT / "egbe")
        print(f"generated {len(generated)} files into egbe/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
