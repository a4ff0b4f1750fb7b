"""Failure output: the seed, the swarm, the violations, a minimal trace and the replay command.

The minimal trace comes from the shortest failing run (``run --shrink`` bisects the step count)
and keeps what explains the violation: every fault, restart and metadata-level operation, the
operations on the violated ledgers (runs of adds collapsed to one line), and the reads of the
violated entries only.
"""

from __future__ import annotations

from .runner import RunResult
from .trace import HistoryOp

TRACE_LINES = 100


def replay_command(result: RunResult) -> str:
    broken = f" --broken {result.broken}" if result.broken else ""
    return f"PYTHONHASHSEED=0 python -m tests.sim run --seed {result.seed} --steps {result.steps}{broken}"


def _relevant(op: HistoryOp, ledgers: set[int], entries: set[tuple[int, int]]) -> bool:
    if op.ledger >= 0 and op.ledger not in ledgers:
        return False
    if op.f == "read-entry":
        return (op.ledger, op.entry) in entries
    return not (op.f == "lac" and op.kind == "ok" and not entries and ledgers)


def minimal_trace(result: RunResult) -> list[str]:
    ledgers = {v.ledger for v in result.violations if v.ledger >= 0}
    entries = {(v.ledger, v.entry) for v in result.violations if v.entry >= 0}
    ops = {str(op): op for op in result.trace.history}
    lines: list[str] = []
    run: list[HistoryOp] = []

    def flush() -> None:
        if len(run) == 1:
            lines.append(str(run[0]))
        elif run:
            first, last = run[0], run[-1]
            lines.append(f"{first} .. e{last.entry} ({len(run)} {first.kind} {first.f})")
        run.clear()

    for line in result.trace.events:
        op = ops.get(line)
        if op is None:
            flush()
            if "channel closed" not in line:
                lines.append(line)
            continue
        if not _relevant(op, ledgers, entries):
            continue
        if (
            op.f == "add"
            and run
            and (run[0].process, run[0].kind, run[0].ledger) == (op.process, op.kind, op.ledger)
        ):
            run.append(op)
            continue
        flush()
        if op.f == "add":
            run.append(op)
        else:
            lines.append(line)
    flush()
    if len(lines) > TRACE_LINES:
        lines = [
            *lines[:10],
            f"... {len(lines) - TRACE_LINES} lines left out ...",
            *lines[-(TRACE_LINES - 10) :],
        ]
    return lines


def failure_report(result: RunResult) -> str:
    out = [
        f"seed {result.seed} ({result.steps} steps, broken={result.broken or '-'}) FAILED",
        f"swarm: {result.swarm.describe()}",
        *(f"violation: {v}" for v in result.violations[:20]),
        f"trace hash {result.trace_hash}, {result.events} events, {result.sim_seconds:.1f} s simulated",
        "minimal trace:",
        *(f"  {line}" for line in minimal_trace(result)),
        f"replay: {replay_command(result)}",
    ]
    return "\n".join(out)
