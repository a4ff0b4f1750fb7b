"""``--help`` text made from a module docstring: the summary line dropped (it is the command's
one-line ``help``) and reStructuredText markup taken out, since a terminal shows it verbatim."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|mod|func|meth|data|attr):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def description_from(doc: str | None) -> str | None:
    """The docstring after its first paragraph, as plain text (None without one)."""
    if not doc or "\n\n" not in doc:
        return None
    return plain(doc.split("\n\n", 1)[1])
