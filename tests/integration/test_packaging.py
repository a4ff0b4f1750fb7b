"""The wheel as users get it: built from this tree, installed into fresh virtual environments with
and without the ``server`` extra, type-checked as a user's script is, and used against a real
cluster. Installing pulls the dependencies from the package index (or pip's cache)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from tests.support.bookies import BookieFactory

from bkmeta.metadata_client import MetadataClient

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTION = "bookkeeper-python"
PIP_TIMEOUT_S = 600

USER_SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    from bkclient import BookKeeper, DigestType


    async def main(zk: str) -> None:
        async with await BookKeeper.connect(zk) as bk:
            wh = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1,
                                        digest=DigestType.CRC32C, password=b"secret")
            first: int = await wh.append(b"hello")
            await wh.append(b"world")
            await wh.close()
            rh = await bk.open_ledger(wh.ledger_id, password=b"secret")
            got = [entry.data async for entry in rh.read(first, first + 1)]
            assert got == [b"hello", b"world"], got
            print("read back", len(got), "entries")


    asyncio.run(main(sys.argv[1]))
    """
)

# A user's type checker must see our annotations (py.typed): this misuse is an error only then.
MISTYPED_SCRIPT = textwrap.dedent(
    """
    from bkclient import BookKeeper

    async def main() -> None:
        bk = await BookKeeper.connect(2181)
    """
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
          str(REPO)])
    (built,) = out.glob("bookkeeper_python-*.whl")
    return built


# Without PYTHONPATH, so that the fresh environments import the installed wheel, not this tree.
CLEAN_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                          cwd=cwd, env=CLEAN_ENV)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _fresh_venv(path: Path, requirement: str) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    python = path / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", requirement])
    return python


def test_wheel_ships_type_information_and_every_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [line for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    for package in ("bkproto", "bkmeta", "bookie", "autorecovery", "bkclient", "pybk"):
        assert f"{package}/py.typed" in names
    core = [r for r in requires if "extra ==" not in r]
    assert not any(name in r for r in core for name in ("rocksdict", "prometheus", "pyspark"))
    assert any("rocksdict" in r and "extra == 'server'" in r for r in requires)


async def _init_cluster(zk_hosts: str) -> None:
    async with await MetadataClient.connect(zk_hosts, require_cluster=False) as meta:
        await meta.init_new_cluster()


def test_client_only_install_talks_to_a_real_cluster(
    wheel: Path, tmp_path: Path, zk_hosts: str, bookie_factory: BookieFactory
) -> None:
    python = _fresh_venv(tmp_path / "client-venv", str(wheel))
    listed = _run([str(python), "-m", "pip", "list", "--format=freeze"]).stdout.lower()
    assert "rocksdict" not in listed and "prometheus" not in listed and "pyspark" not in listed

    assert DISTRIBUTION in _run([str(tmp_path / "client-venv" / "bin" / "pybk"), "--version"]).stdout
    refused = subprocess.run([str(tmp_path / "client-venv" / "bin" / "pybk"), "bookie"],
                             capture_output=True, text=True, timeout=60, check=False, env=CLEAN_ENV)
    assert refused.returncode == 2 and f"{DISTRIBUTION}[server]" in refused.stderr

    asyncio.run(_init_cluster(zk_hosts))
    bookie_factory(zk=zk_hosts)
    script = tmp_path / "hello.py"
    script.write_text(USER_SCRIPT)
    done = _run([str(python), str(script), zk_hosts], cwd=tmp_path)
    assert "read back 2 entries" in done.stdout

    # The user's type checker (ours, pointed at the fresh environment) sees the package's types.
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable", str(python)]
    _run([*mypy, str(script)], cwd=tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text(MISTYPED_SCRIPT)
    rejected = subprocess.run([*mypy, str(bad)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_S, check=False, env=CLEAN_ENV)
    assert rejected.returncode == 1 and "connect" in rejected.stdout, rejected.stdout


def test_server_extra_installs_the_bookie(wheel: Path, tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "server-venv", f"{wheel}[server]")
    pybk = tmp_path / "server-venv" / "bin" / "pybk"
    assert DISTRIBUTION in _run([str(pybk), "--version"]).stdout
    assert "--journal-dirs" in _run([str(pybk), "bookie", "--help"]).stdout
    _run([str(python), "-c", "import bookie.bookie, autorecovery.service, bkclient"])
