"""What ``pybk verify`` tells the user: one screen of summary, the same as JSON, and a plot.

On a violation the summary carries what is needed to look into it: the seed, the fault timeline
around it and the minimal history of the entries involved.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pybk.bench.report import percentile
from pybk.verify.checker import (
    AFTER_FENCE,
    CLOSE_MISMATCH,
    CORRUPT,
    CRASH,
    DIVERGENT,
    LOST,
    TAIL_GAP,
    TRUNCATED,
    UNHEALTHY,
    CheckResult,
    Violation,
    history_around,
)
from pybk.verify.history import Event
from pybk.verify.nemesis import Fault, RoundResult

SHOWN_VIOLATIONS = 5
TIMELINE_MARGIN_S = 10.0


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50": round(percentile(ordered, 50), 2),
        "p99": round(percentile(ordered, 99), 2),
        "max": round(ordered[-1], 2) if ordered else 0.0,
    }


@dataclass
class AddSample:
    t: float  # wall-clock time of the acknowledgement
    latency_ms: float


@dataclass
class VerifyReport:
    seed: int
    mode: str  # "own cluster" or "external cluster at HOST:PORT"
    elapsed_s: float
    check: CheckResult
    rounds: list[RoundResult] = field(default_factory=list)
    timeline: list[Fault] = field(default_factory=list)
    adds: list[AddSample] = field(default_factory=list)
    final_heal_s: float | None = None
    heal_limit_s: float = 60.0
    notes: list[str] = field(default_factory=list)
    history: list[Event] = field(default_factory=list)  # for the minimal histories

    @property
    def ok(self) -> bool:
        return not self.check.violations

    def fault_spans(self) -> list[tuple[float, float]]:
        """The times some fault was active or not yet healed from (until the cluster was healthy
        again), as merged (start, end) spans in order."""
        spans: list[tuple[float, float]] = []
        for start, end in sorted((f.start, f.settled or f.end or f.start) for f in self.timeline):
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
        return spans

    def split_latencies(self) -> tuple[list[float], list[float]]:
        """Add latencies of adds invoked while a fault was active, and of the others."""
        spans = self.fault_spans()
        starts = [s for s, _ in spans]
        faulted: list[float] = []
        calm: list[float] = []
        for add in self.adds:
            invoked = add.t - add.latency_ms / 1000.0
            i = bisect.bisect_right(starts, invoked) - 1
            (faulted if i >= 0 and invoked <= spans[i][1] else calm).append(add.latency_ms)
        return faulted, calm

    def recovery_after_faults(self) -> list[float]:
        """Per healed fault: seconds until a writer was acknowledged again."""
        ack_times = sorted(a.t for a in self.adds)
        out: list[float] = []
        for fault in self.timeline:
            if fault.end is None:
                continue
            i = bisect.bisect_left(ack_times, fault.end)
            if i < len(ack_times):
                out.append(ack_times[i] - fault.end)
        return out

    def as_dict(self) -> dict[str, Any]:
        c = self.check
        kinds = Counter(f.kind for f in self.timeline)
        faulted, calm = self.split_latencies()
        healed = [r.healthy_after_s for r in self.rounds if r.healthy_after_s is not None]
        out: dict[str, Any] = {
            "ok": self.ok,
            "seed": self.seed,
            "mode": self.mode,
            "elapsed_s": round(self.elapsed_s, 1),
            "rounds": len(self.rounds),
            "fault_schedules": len(self.rounds),
            "faults_by_kind": dict(sorted(kinds.items())),
            "ledgers": c.ledgers,
            "acknowledged": c.acknowledged,
            "unknown_outcome": c.unknown,
            "recoveries": c.recoveries,
            "log_batches_committed": c.log_commits,
            "reads": c.reads,
            "lost": c.count(LOST),
            "truncated": c.count(TRUNCATED),
            "divergent": c.count(DIVERGENT),
            "acked_after_fence": c.count(AFTER_FENCE),
            "close_mismatch": c.count(CLOSE_MISMATCH),
            "corrupt": c.count(CORRUPT),
            "tail_gaps": c.count(TAIL_GAP),
            "crashes": c.count(CRASH),
            "unhealthy": c.count(UNHEALTHY),
            "healthy_after_round_s": _stats(healed),
            "first_ack_after_fault_s": _stats(self.recovery_after_faults()),
            "final_heal_s": None if self.final_heal_s is None else round(self.final_heal_s, 2),
            "heal_limit_s": self.heal_limit_s,
            "latency_ms_under_faults": _stats(faulted),
            "latency_ms_without_faults": _stats(calm),
            "notes": self.notes,
            "violations": [v.as_dict() for v in c.violations],
        }
        if not self.ok:
            out["timeline"] = [f.as_dict() for f in self.timeline]
            out["histories"] = [
                {"violation": v.as_dict(), "history": history_around(self.history, v)}
                for v in c.violations[:SHOWN_VIOLATIONS]
            ]
        return out

    def print(self, as_json: bool, out: TextIO) -> None:
        d = self.as_dict()
        if as_json:
            print(json.dumps(d), file=out)
            return
        verdict = "OK: nothing acknowledged was lost" if self.ok else "VIOLATIONS FOUND"
        print(f"pybk verify: {verdict} (seed {self.seed}, {self.mode}, {d['elapsed_s']} s)", file=out)
        kinds = ", ".join(f"{k} {n}" for k, n in d["faults_by_kind"].items()) or "none"
        print(f"  rounds {d['rounds']} (fault schedules)   faults: {kinds}", file=out)
        print(f"  ledgers {d['ledgers']}   acknowledged {d['acknowledged']}   unknown outcome "
              f"{d['unknown_outcome']}   recoveries {d['recoveries']}   log batches committed "
              f"{d['log_batches_committed']}   reads "
              + ", ".join(f"{k} {n}" for k, n in sorted(d["reads"].items())), file=out)
        print(f"  lost {d['lost']}   truncated {d['truncated']}   divergent {d['divergent']}   "
              f"acked after fence {d['acked_after_fence']}   close mismatch {d['close_mismatch']}   "
              f"corrupt {d['corrupt']}   tail gaps {d['tail_gaps']}   crashes {d['crashes']}   "
              f"unhealthy {d['unhealthy']}", file=out)
        h, a = d["healthy_after_round_s"], d["first_ack_after_fault_s"]
        final = "n/a" if d["final_heal_s"] is None else f"{d['final_heal_s']} s"
        if self.rounds:  # against an existing cluster nothing is injected, so nothing heals
            print(f"  recovery: cluster healthy after a round p50 {h['p50']} s max {h['max']} s; first "
                  f"ack after a fault healed p50 {a['p50']} s max {a['max']} s; after the last fault "
                  f"{final} (limit {d['heal_limit_s']:.0f} s)", file=out)
        f, n = d["latency_ms_under_faults"], d["latency_ms_without_faults"]
        print(f"  add latency ms under faults p50 {f['p50']} p99 {f['p99']} max {f['max']} ({f['count']}); "
              f"without p50 {n['p50']} p99 {n['p99']} max {n['max']} ({n['count']})", file=out)
        for note in self.notes:
            print(f"  note: {note}", file=out)
        if self.ok:
            return
        print(f"\nviolations ({len(self.check.violations)}); reproduce with --seed {self.seed}:", file=out)
        for v in self.check.violations[:SHOWN_VIOLATIONS * 4]:
            print(f"  [{v.kind}] {v.detail}", file=out)
        for v in self.check.violations[:SHOWN_VIOLATIONS]:
            self._print_context(v, out)

    def _print_context(self, v: Violation, out: TextIO) -> None:
        print(f"\n  around [{v.kind}] {v.detail}", file=out)
        if v.t is not None:
            near = [f for f in self.timeline if f.start - TIMELINE_MARGIN_S <= v.t
                    and v.t <= (f.end or f.start) + TIMELINE_MARGIN_S]
            for fault in near:
                span = f"{fault.start - v.t:+.2f} s .. {(fault.end or fault.start) - v.t:+.2f} s"
                print(f"    fault {span}  {fault.kind} {fault.target} {fault.detail}", file=out)
        for ev in history_around(self.history, v):
            fields = {k: x for k, x in ev.items() if k not in ("t", "p", "f", "op")}
            rel = f"{ev['t'] - v.t:+.3f} s" if v.t is not None else f"{ev['t']:.3f}"
            print(f"    {rel}  {ev['p']:<14} {ev['f']:<6} {ev['op']:<10} {fields}", file=out)


def plot(report: VerifyReport, path: Path) -> None:
    """Throughput (acks a second) and add latency over time, each fault a shaded span."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not report.adds:
        t0 = min((f.start for f in report.timeline), default=0.0)
    else:
        t0 = min(a.t for a in report.adds)
    per_second: Counter[int] = Counter(int(a.t - t0) for a in report.adds)
    seconds = list(range(max(per_second, default=0) + 1))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(12, 6))
    top.plot(seconds, [per_second.get(s, 0) for s in seconds], lw=0.8)
    top.set_ylabel("acks / s")
    bottom.scatter([a.t - t0 for a in report.adds], [a.latency_ms for a in report.adds], s=1)
    bottom.set_yscale("log")
    bottom.set_ylabel("add latency (ms)")
    bottom.set_xlabel("seconds")
    colours: dict[str, Any] = {}
    cmap = plt.get_cmap("tab10")
    for fault in report.timeline:
        colour = colours.setdefault(fault.kind, cmap(len(colours) % 10))
        end = fault.end if fault.end is not None else fault.start
        for ax in (top, bottom):
            ax.axvspan(fault.start - t0, end - t0, color=colour, alpha=0.2, lw=0)
    handles = [Rectangle((0, 0), 1, 1, color=c, alpha=0.4) for c in colours.values()]
    if handles:
        top.legend(handles, list(colours), fontsize="small", ncol=4, loc="upper right")
    title = f"pybk verify seed {report.seed}: {report.check.acknowledged} acknowledged, " + (
        "nothing lost" if report.ok else f"{len(report.check.violations)} violations")
    top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
