"""``pybk bench ... --plot FILE.png``: a benchmark's run as a picture, drawn with matplotlib (the
``verify`` extra): throughput and latency percentiles second by second, and the whole run's
latency distribution (HdrHistogram's percentile spectrum, the tail spread out on a log axis)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

from pybk.bench.report import BenchResult

# The percentile axis of the distribution: 1 / (1 - p), labelled at these percentiles.
TAIL_TICKS: tuple[float, ...] = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)


def plot_path(text: str) -> Path:
    """argparse type of ``--plot``: checked before the run (exit 2), not after it."""
    if importlib.util.find_spec("matplotlib") is None:
        raise argparse.ArgumentTypeError("needs matplotlib: pip install 'bookkeeper-python[verify]'")
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no directory {path.parent} to write {path.name} in")
    return path


def add_plot_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", type=plot_path, default=None, metavar="FILE.png",
                        help="draw throughput and latency percentiles over time, and the latency"
                             " distribution (needs matplotlib)")


def _tail_x(percentile: float) -> float:
    return 1.0 / max(1e-6, 1.0 - percentile / 100.0)


def plot_result(result: BenchResult, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A last second shorter than half a second (the drain of the last few operations) would draw
    # a rate from a handful of them; it stays in the printed series, not in the picture.
    series = [row for row in result.latencies.series if row.duration_s >= 0.5] or result.latencies.series
    seconds = [row.second + row.duration_s for row in series]  # each row at the end of its second
    fig, (rate_ax, time_ax, dist_ax) = plt.subplots(3, 1, figsize=(11, 10))
    rate_ax.plot(seconds, [row.ops_per_s for row in series], lw=1.2, color="tab:blue")
    rate_ax.set_ylabel("operations / s")
    rate_ax.set_xlabel("seconds into the run")
    rate_ax.set_ylim(bottom=0)
    rate_ax.grid(alpha=0.3)
    rate_ax.set_title(f"{title}: {result.entries:,} operations in {result.elapsed_s:.1f} s")

    timed = [(x, row) for x, row in zip(seconds, series, strict=True) if row.p50_ms is not None]
    for label, colour in (("max", "tab:red"), ("p99", "tab:orange"), ("p50", "tab:green")):
        values = [getattr(row, f"{label}_ms") for _, row in timed]
        time_ax.plot([x for x, _ in timed], values, lw=1.2, color=colour, label=label,
                     marker="." if len(timed) < 40 else None)
    time_ax.set_yscale("log")
    _plain_numbers(time_ax)
    time_ax.set_ylabel("latency (ms), per second")
    time_ax.set_xlabel("seconds into the run")
    time_ax.set_xlim(rate_ax.get_xlim())
    time_ax.grid(alpha=0.3, which="both")
    if timed:
        time_ax.legend(loc="best", fontsize="small")

    histogram = result.latencies.histogram
    total = histogram.get_total_count()
    if total:
        # The spectrum ends at the last operation: percentile 100 - 100/N (100 itself is infinitely
        # far out on this axis), where the largest value is drawn.
        last = 100.0 - 100.0 / total if total > 1 else 50.0
        points = [(item.percentile_level_iterated_to, item.value_iterated_to / 1000.0)
                  for item in histogram.get_percentile_iterator(5)
                  if item.percentile_level_iterated_to < last]
        points.append((last, histogram.get_max_value() / 1000.0))
        dist_ax.plot([_tail_x(p) for p, _ in points], [ms for _, ms in points], lw=1.5, color="tab:purple",
                     drawstyle="steps-post")
        dist_ax.set_xscale("log")
        ticks = [t for t in TAIL_TICKS if _tail_x(t) <= _tail_x(last) * 1.0001]
        dist_ax.set_xticks([_tail_x(t) for t in ticks], [f"{t:g}%" for t in ticks])
        dist_ax.minorticks_off()
        lowest = min(ms for _, ms in points)
        if lowest > 0 and max(ms for _, ms in points) / lowest > 20:
            dist_ax.set_yscale("log")
            _plain_numbers(dist_ax)
    dist_ax.set_xlabel("percentile")
    dist_ax.set_ylabel("latency (ms)")
    summary = result.as_dict()["latency_ms"]
    dist_ax.set_title("latency distribution, whole run: " + ", ".join(
        f"{k} {v:g} ms" for k, v in summary.items() if not math.isnan(v)), fontsize="medium")
    dist_ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plain_numbers(ax: Any) -> None:
    """Log-axis ticks at 1, 2, 5, 10, 20 ... written as plain numbers rather than 2x10^1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def print_and_plot(result: BenchResult, args: argparse.Namespace, title: str) -> None:
    """The report on stdout (``--json``: one object), and the picture when ``--plot`` asks."""
    result.print(args.json, title)
    if args.plot is not None:
        plot_result(result, args.plot, title)
        print(f"plot written to {args.plot}", file=sys.stderr)
