"""The packages' re-exports are imported on first use: every public name still imports as
before, and a Spark worker that unpickles the data source does not load the client."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import bkclient
import bkmeta


@pytest.mark.parametrize("package", [bkclient, bkmeta])
def test_every_public_name_of_the_package_imports(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    for module, exported in package._EXPORTS.items():  # type: ignore[attr-defined]
        for name in exported:
            assert getattr(package, name) is getattr(importlib.import_module(module), name)
    namespace: dict[str, object] = {}
    exec(f"from {package.__name__} import *", namespace)  # type: ignore[attr-defined]
    assert set(names) <= set(namespace)


def test_submodules_stay_reachable_as_attributes_and_unknown_names_fail() -> None:
    assert bkclient.sync.BookKeeper.__name__ == "BookKeeper"  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        bkclient.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_spark_data_source_leaves_the_client_unloaded() -> None:
    pytest.importorskip("pyspark", reason="the spark extra is part of `make install`")
    script = (
        "import sys, bkclient.spark\n"
        "heavy = ('grpc', 'kazoo', 'bkclient.sync', 'bkclient.bookkeeper')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
