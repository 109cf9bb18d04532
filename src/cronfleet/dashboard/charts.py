"""The dashboard's charts, drawn on the server as inline SVG (no script, no CDN): a job's
durations over time with its failures marked, and the runs per minute by outcome of the
overview. Colours come from the stylesheet (one class per cell state), so the charts
follow the light and dark themes; each chart carries a text summary for screen readers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, tzinfo

from markupsafe import Markup, escape

__all__ = ["activity_chart", "durations_chart"]

W, H = 720, 180  # the view box; the chart scales to its container's width
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 22
FAILED = frozenset({"failed", "interrupted", "cancelled"})


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _secs(v: float) -> str:
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 120:
        return f"{v:.3g} s"
    return f"{v / 60:.3g} min"


def _axis(ticks: Sequence[tuple[float, str]], y_ticks: Sequence[tuple[float, str]]) -> str:
    out = [f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" '
           f'y2="{H - BOTTOM}"/>']
    for x, label in ticks:
        out.append(f'<text class="tick" x="{_num(x)}" y="{H - 6}" text-anchor="middle">'
                   f'{escape(label)}</text>')
    for y, label in y_ticks:
        out.append(f'<line class="grid" x1="{LEFT}" y1="{_num(y)}" x2="{W - RIGHT}" '
                   f'y2="{_num(y)}"/>')
        out.append(f'<text class="tick" x="{LEFT - 4}" y="{_num(y + 4)}" '
                   f'text-anchor="end">{escape(label)}</text>')
    return "".join(out)


def _time_ticks(t0: float, t1: float, tz: tzinfo, x: Callable[[float], float], n: int = 5
                ) -> list[tuple[float, str]]:
    if t1 <= t0:
        return []
    long = t1 - t0 > 2 * 86400
    fmt = "%m-%d %H:%M" if long else "%H:%M"
    step = (t1 - t0) / (n - 1)
    return [(x(t0 + k * step), datetime.fromtimestamp(t0 + k * step, UTC).astimezone(tz)
             .strftime(fmt)) for k in range(n)]


def durations_chart(points: Sequence[tuple[float, float, str, int]], tz: tzinfo,
                    label: str) -> Markup:
    """A job's ended runs, ``(slot, duration, state, run id)`` oldest first: one dot per
    run at its slot and duration, failures as crosses, each titled with its run."""
    if not points:
        return Markup('<p class="hint">No ended run yet.</p>')
    t0, t1 = points[0][0], points[-1][0]
    if t1 == t0:
        t0, t1 = t0 - 30, t1 + 30
    top = max(p[1] for p in points) or 1.0
    top *= 1.1

    def x(t: float) -> float:
        return LEFT + (t - t0) / (t1 - t0) * (W - LEFT - RIGHT)

    def y(d: float) -> float:
        return H - BOTTOM - d / top * (H - TOP - BOTTOM)

    marks = []
    failed = 0
    for at, d, st, rid in points:
        px, py = x(at), y(d)
        what = f"run #{rid}: {st}, {_secs(d)}"
        if st in FAILED:
            failed += 1
            shape = (f'<path class="mark {st}" d="M{_num(px - 4)} {_num(py - 4)}l8 8m0 -8l-8 8"'
                     f'/>')
        else:
            shape = f'<circle class="mark {st}" cx="{_num(px)}" cy="{_num(py)}" r="2.5"/>'
        marks.append(f'<g><title>{escape(what)}</title>{shape}</g>')
    y_ticks = [(y(top * k / 4), _secs(top * k / 4)) for k in (1, 2, 3)]
    summary = (f"{label}: {len(points)} ended runs, {failed} failed; durations from "
               f"{_secs(min(p[1] for p in points))} to {_secs(max(p[1] for p in points))}")
    return Markup(
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(summary)}"'
        f' focusable="false"><title>{escape(summary)}</title>'
        f'{_axis(_time_ticks(t0, t1, tz, x), y_ticks)}{"".join(marks)}</svg>')


ORDER = ("succeeded", "running", "pending", "skipped", "paused", "cancelled", "missed",
         "interrupted", "failed")  # bottom to top of a bar


def activity_chart(buckets: Sequence[dict[str, int]], start: float, bucket: int,
                   tz: tzinfo) -> Markup:
    """Runs per bucket (a minute, or a quarter of an hour over a day) stacked by state."""
    n = len(buckets)
    top = max((sum(b.values()) for b in buckets), default=0)
    total = sum(sum(b.values()) for b in buckets)
    per = "minute" if bucket == 60 else f"{bucket // 60} minutes"
    if not total:
        return Markup(f'<p class="hint">No run in this window (runs per {per}).</p>')
    span = W - LEFT - RIGHT
    bw = span / n

    def x(t: float) -> float:
        return LEFT + (t - start) / (n * bucket) * span

    def h(v: float) -> float:
        return v / top * (H - TOP - BOTTOM)

    bars = []
    for k, counts in enumerate(buckets):
        y0: float = H - BOTTOM
        for st in ORDER:
            v = counts.get(st, 0)
            if not v:
                continue
            hh = h(v)
            y0 -= hh
            bars.append(f'<rect class="{st}" x="{_num(LEFT + k * bw)}" y="{_num(y0)}" '
                        f'width="{_num(max(bw - 1, 1))}" height="{_num(hh)}"/>')
    sums: dict[str, int] = {}
    for counts in buckets:
        for st, v in counts.items():
            sums[st] = sums.get(st, 0) + v
    summary = (f"Runs per {per}, {total} in all: " +
               ", ".join(f"{sums[st]} {st}" for st in reversed(ORDER) if sums.get(st)))
    y_ticks = [(H - BOTTOM - h(top * k / 2), f"{top * k / 2:.3g}") for k in (1, 2)]
    ticks = _time_ticks(start, start + n * bucket, tz, x)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(summary)}"'
        f' focusable="false"><title>{escape(summary)}</title>{_axis(ticks, y_ticks)}'
        f'{"".join(bars)}</svg>')
