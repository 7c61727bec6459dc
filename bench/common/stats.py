"""The statistics every report uses, each defined once and named for what it is.

``spread`` is the one spread of a figure over its repetitions: its minimum and maximum (reports
write "median (min–max)"). Where a run holds many samples (every call of every round, llama-bench's
samples), a report gives the 10th and 90th percentiles instead and says so (``p10_p90``); the door
reports give the interquartile range of per-call differences (``quartiles``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The minimum and maximum of a figure over its repetitions."""
    return min(values), max(values)


def p10_p90(values: Sequence[float]) -> list[float]:
    """The 10th and 90th percentiles (nearest rank below) of many samples."""
    v = sorted(values)
    return [v[int(0.1 * (len(v) - 1))], v[int(0.9 * (len(v) - 1))]]


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """The median and the first and third quartiles."""
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return statistics.median(values), q[0], q[2]


def digits_for(values: Sequence[float]) -> int:
    """Decimals that show a figure's differences: none for counts and large figures."""
    med, hi = statistics.median(values), max(values)
    if all(isinstance(v, int) for v in values) and med == int(med):
        return 0
    return 2 if hi < 10 else 1 if hi < 100 else 0


def median_spread(values: Sequence[float], digits: int | None = None) -> str:
    """ "median (min–max)" of a figure over its repetitions ("n/a" for none)."""
    if not values:
        return "n/a"
    d = digits_for(values) if digits is None else digits
    lo, hi = spread(values)
    text = f"{statistics.median(values):.{d}f}"
    return text if len(values) == 1 else f"{text} ({lo:.{d}f}–{hi:.{d}f})"


def median_p10_p90(values: Sequence[float]) -> str:
    """ "median (p10–p90)" of many samples."""
    lo, hi = p10_p90(values)
    return f"{statistics.median(values):.2f} ({lo:.2f}–{hi:.2f})"


def ms_span(lo_hi: Sequence[float]) -> str:
    return f"{lo_hi[0]:.1f}–{lo_hi[1]:.1f}"
