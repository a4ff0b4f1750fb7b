"""Package re-exports imported on first use (PEP 562), so importing one light module of a
package does not import all of it.

A Spark Python worker imports ``bkclient.spark`` to unpickle the data source, although most
workers (schema, write planning) never use the client: with eager ``__init__`` re-exports, each
such process paid for gRPC, kazoo and the whole read and write paths.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, Iterable[str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``exports[module]`` is imported
    from ``module`` when first asked for, then kept in the package's namespace; any other name
    is looked up as a submodule (``package.name``), as eager imports of the submodules made it
    available before."""
    origins = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        origin = origins.get(name)
        if origin is not None:
            value = getattr(importlib.import_module(origin), name)
            setattr(importlib.import_module(package), name, value)
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise  # the submodule exists and failed to import: that is the error to see
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
