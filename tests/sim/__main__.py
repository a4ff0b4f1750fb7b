"""``python -m tests.sim run --seed N --steps K`` replays one seed; ``campaign --seeds A..B`` runs
many and reports violations and throughput. Both re-run themselves under ``PYTHONHASHSEED=0``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .report import failure_report
from .runner import run_seed, shrink


def _parse_range(text: str) -> range:
    first, _, last = text.partition("..")
    return range(int(first), int(last or first) + 1)


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # string hashing must not vary between runs
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *(argv or sys.argv[1:])])
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run (replay) one seed")
    run.add_argument("--seed", type=int, required=True)
    run.add_argument("--steps", type=int, default=200)
    run.add_argument("--broken", default="", help="plant a known bug (test-only variants)")
    run.add_argument("--shrink", action="store_true", help="on failure, find the fewest failing steps")
    run.add_argument("--trace", action="store_true", help="print every readable event")
    camp = sub.add_parser("campaign", help="run a range of seeds")
    camp.add_argument("--seeds", type=_parse_range, required=True, help="A..B, inclusive")
    camp.add_argument("--steps", type=int, default=200)
    camp.add_argument("--broken", default="")
    camp.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "run":
        result = run_seed(args.seed, args.steps, args.broken)
        if args.trace:
            print("\n".join(result.trace.events))
        if result.ok:
            print(
                f"seed {args.seed}: ok ({result.events} events, {result.sim_seconds:.1f} s simulated in "
                f"{result.wall_seconds:.2f} s, trace hash {result.trace_hash})"
            )
            return 0
        if args.shrink:
            names = {v.checker for v in result.violations}
            result = shrink(
                args.seed, args.steps, args.broken, lambda r: bool(names & {v.checker for v in r.violations})
            )
        print(failure_report(result))
        return 1
    return _campaign(args.seeds, args.steps, args.broken, args.stop_on_failure)


def _campaign(seeds: range, steps: int, broken: str, stop_on_failure: bool) -> int:
    """Run ``seeds``; print each failure in full and throughput as it goes (wall clock and CPU
    time: on a shared machine the CPU figure is the one that compares)."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    failed: list[int] = []
    events = done = 0
    simulated = 0.0

    def rates() -> str:
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        return (
            f"{done / wall * 60:.0f} seeds/min and {events / wall:.0f} simulated events/s wall-clock; "
            f"{done / cpu * 60:.0f} seeds/min and {events / cpu:.0f} events/s per CPU; "
            f"{simulated / cpu:.0f} simulated seconds per CPU second"
        )

    for seed in seeds:
        result = run_seed(seed, steps, broken)
        done += 1
        events += result.events
        simulated += result.sim_seconds
        if not result.ok:
            failed.append(seed)
            print(failure_report(result), flush=True)
            if stop_on_failure:
                break
        if done % 100 == 0:
            print(f"... {done} seeds (last {seed}), {len(failed)} failed; {rates()}", flush=True)
    print(
        f"{done} seeds ({seeds.start}..{seed}), {done - len(failed)} with zero violations, failed: {failed}"
    )
    print(rates())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
