"""Failure output: the seed, the swarm, the violations, a minimal trace and the replay command."""

from __future__ import annotations

from .runner import RunResult

TRACE_LINES = 80


def replay_command(result: RunResult) -> str:
    broken = f" --broken {result.broken}" if result.broken else ""
    return f"PYTHONHASHSEED=0 python -m tests.sim run --seed {result.seed} --steps {result.steps}{broken}"


def minimal_trace(result: RunResult) -> list[str]:
    """The events that concern the violated ledgers, plus every fault and restart (events that
    name no ledger), the last ``TRACE_LINES`` of them."""
    ledgers = {v.ledger for v in result.violations if v.ledger >= 0}
    marks = tuple(f" L{lid} " for lid in ledgers) + tuple(f" L{lid}\n" for lid in ledgers)
    lines = []
    for line in result.trace.events:
        padded = line + "\n"
        names_ledger = " L" in line and any(ch.isdigit() for ch in line.split(" L", 1)[1][:1])
        if not names_ledger or any(m in padded for m in marks):
            lines.append(line)
    return lines[-TRACE_LINES:]


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
