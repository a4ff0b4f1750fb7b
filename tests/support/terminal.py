"""A text stream that says it is a terminal, to see what a command draws for a person."""

from __future__ import annotations

import io


class TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True
