"""Progress bars of long work: drawn on a terminal, never into a pipe or a file, never with
``--json``, and erased when the work ends."""

from __future__ import annotations

import io

from tests.support.terminal import TerminalStream

from pybk.progress import Progress


def test_a_terminal_gets_a_bar_that_is_erased_at_the_end() -> None:
    stream = TerminalStream()
    with Progress(1000, description="writing", stream=stream) as progress:
        assert progress.enabled
        progress.update(500)
        progress.update(1000)
    drawn = stream.getvalue()
    assert "writing" in drawn
    # Closing overwrites the bar with blanks and returns to the start of the line.
    assert drawn.endswith("\r")
    assert drawn.rsplit("\r", 2)[-2].strip() == ""
    assert not progress.enabled


def test_nothing_is_drawn_into_a_pipe_or_with_json() -> None:
    pipe = io.StringIO()
    with Progress(1000, stream=pipe) as progress:
        progress.update(1000)
    assert pipe.getvalue() == ""
    terminal = TerminalStream()
    with Progress(1000, stream=terminal, quiet=True) as progress:
        progress.update(1000)
    assert terminal.getvalue() == ""


def test_small_work_gets_no_bar_and_a_total_learnt_late_decides() -> None:
    terminal = TerminalStream()
    with Progress(10, stream=terminal) as small:
        small.update(10)
    assert terminal.getvalue() == ""
    with Progress(unit="ledgers", stream=terminal, min_total=2) as late:
        assert not late.enabled
        late.update(1, total=5)
        assert late.enabled
    assert "ledgers" in terminal.getvalue()
