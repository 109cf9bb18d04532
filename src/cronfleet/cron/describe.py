"""English descriptions: ``"At 02:30 every day"``.

The wording of times of day, steps, ranges, months and most day rules comes from the
``cron-descriptor`` library. We write our own text only where it has nothing to offer or
gets our semantics wrong (see docs/cron.md, "Descriptions"):

* intervals (``@every 1h30m``) -- not cron syntax at all;
* combining day-of-month with day-of-week: cron-descriptor always reads them as OR and
  often leaves the connector out; we say "or" (both restricted, Vixie OR) or
  "but only" (AND, when one field starts with ``*``);
* day-of-week steps (cron-descriptor reads ``FRI/2`` as "every 2 weeks") and lists mixing
  ``#``/``L`` items, day-of-month lists mixing ``L``/``W`` items (it drops or garbles
  them): these get our own phrase;
* wrap-around ranges of weekdays and months (``FRI-MON``): they are rewritten as two
  plain ranges before cron-descriptor sees them (hour ones read well as they are; the
  parser refuses them in seconds, minutes and days of the month).

:func:`describe` never raises for a parsed expression: if cron-descriptor fails, a plain
fallback naming the fields is returned.
"""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from .duration import format_duration
from .fields import DAY_NAMES, MONTH_NAMES, FieldSpec
from .parser import CronForm, IntervalForm

__all__ = ["describe", "explain"]

_FULL_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_ORDINALS = ("", "first", "second", "third", "fourth", "fifth")


def describe(form: CronForm | IntervalForm, expr: str) -> str:
    """The description of a parsed ``form`` (``expr``: the text it was parsed from, for
    the fallback)."""
    try:
        if isinstance(form, IntervalForm):
            return _describe_interval(form)
        return _describe_cron(form)
    except Exception:  # never let a description break a caller
        return f"Cron schedule {expr!r}"


def _describe_interval(form: IntervalForm) -> str:
    every = format_duration(timedelta(seconds=form.seconds))
    return f"Every {every} (slots counted from 1970-01-01 00:00 UTC)"


def _describe_cron(form: CronForm) -> str:
    return _describe_specs(form.specs, form.schedule.day_and)


@lru_cache(maxsize=1024)
def _describe_specs(specs: tuple[FieldSpec, ...], day_and: bool) -> str:
    sec, minute, hour, dom, month, dow = specs
    # hour wrap-arounds read well as is ("between 22:00 and 02:59"); seconds and minutes
    # cannot wrap (refused by the parser)
    time = _descriptor(f"{_plain(sec)} {_plain(minute)} {_plain(hour, unroll=False)} * * *", "full")

    dom_on = not (dom.star and dom.unrestricted)
    dow_on = not (dow.star and dow.unrestricted)
    dom_text = _dom_phrase(dom) if dom_on else ""
    dow_text = _dow_phrase(dow) if dow_on else ""
    if dom_on and dow_on:
        core = dow_text.removeprefix(", ").removeprefix("only ")
        day = f"{dom_text}, but only {core}" if day_and else f"{dom_text}, or {core}"
    else:
        day = dom_text or dow_text

    month_text = "" if month.unrestricted else _descriptor(f"0 0 * {_plain(month)} *", "month")
    text = f"{time}{day}{month_text}"
    single_time = len(sec.values) == len(minute.values) == len(hour.values) == 1
    if not day and not month_text and single_time:
        text += " every day"
    return text[:1].upper() + text[1:]


def _descriptor(expression: str, part: str) -> str:
    from cron_descriptor import DescriptionTypeEnum, ExpressionDescriptor, Options

    options = Options(use_24hour_time_format=True, locale_code="en_US")
    descriptor = ExpressionDescriptor(expression, options)
    kind = {
        "full": DescriptionTypeEnum.FULL,
        "dom": DescriptionTypeEnum.DAYOFMONTH,
        "dow": DescriptionTypeEnum.DAYOFWEEK,
        "month": DescriptionTypeEnum.MONTH,
    }[part]
    return str(descriptor.get_description(kind))


def _has_wrap(spec: FieldSpec) -> bool:
    for item in spec.text.split(","):
        base = item.split("/", 1)[0]
        if "-" in base and not base.upper().startswith("L"):
            a, _, b = base.partition("-")
            if b.upper() == "L":
                continue
            if _num(a) > _num(b):
                return True
    return False


def _num(text: str) -> int:
    up = text.upper()
    if up.isascii() and up.isdigit():
        return int(up)
    if up in MONTH_NAMES:
        return MONTH_NAMES.index(up) + 1
    if up in DAY_NAMES:
        return DAY_NAMES.index(up)
    return 0


def _compress(values: list[int]) -> str:
    """Sorted values -> '1-5,7,9-12' (runs of three or more become ranges)."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{values[i]}-{values[j]}")
        else:
            out.extend(str(v) for v in values[i : j + 1])
        i = j + 1
    return ",".join(out)


def _plain(spec: FieldSpec, unroll: bool = True) -> str:
    """The field as cron-descriptor should see it: uppercase, wrap-arounds unrolled."""
    if spec.unrestricted and spec.star:
        return "*"
    if unroll and _has_wrap(spec):
        return _compress(sorted(spec.values))
    text = spec.text.upper().replace("?", "*")
    return text.replace("-L", "-31")


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _dom_phrase(dom: FieldSpec) -> str:
    if not dom.has_specials:
        return _descriptor(f"0 0 {_plain(dom)} * *", "dom")
    parts: list[str] = []
    if dom.values:
        days = sorted(dom.values)
        parts.append(("day " if len(days) == 1 else "days ") + _compress(days).replace(",", ", "))
    for n in sorted(dom.nearest):
        parts.append(f"the weekday nearest day {n}")
    for n in sorted(dom.last, reverse=True):
        if n == 0:
            parts.append("the last day")
        elif n == 1:
            parts.append("the day before the last day")
        else:
            parts.append(f"the day {n} days before the last day")
    if dom.last_weekday:
        parts.append("the last weekday")
    return f", on {_join(parts)} of the month"


def _dow_phrase(dow: FieldSpec) -> str:
    if not dow.has_specials and "/" not in dow.text and not _has_wrap(dow):
        return _descriptor(f"0 0 * * {_plain(dow)}", "dow")
    parts = [_FULL_DAY_NAMES[d] for d in sorted(dow.values)]
    for d, n in sorted(dow.nth, key=lambda x: (x[1], x[0])):
        parts.append(f"the {_ORDINALS[n]} {_FULL_DAY_NAMES[d]} of the month")
    for d in sorted(dow.last_dow):
        parts.append(f"the last {_FULL_DAY_NAMES[d]} of the month")
    prefix = "only on " if dow.values and not (dow.nth or dow.last_dow) else "on "
    return f", {prefix}{_join(parts)}"


_FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")


def explain(form: CronForm | IntervalForm, expr: str, tz: ZoneInfo) -> dict[str, object]:
    """Everything a person (or a script) needs to understand a schedule, as plain data:
    ``form`` parsed from the text ``expr``, bound to ``tz``."""
    out: dict[str, object] = {
        "expr": expr,
        "tz": str(tz),
        "description": describe(form, expr),
    }
    if isinstance(form, IntervalForm):
        out.update(
            kind="interval",
            period_seconds=form.seconds,
            period=format_duration(timedelta(seconds=form.seconds)),
            anchor="1970-01-01T00:00:00+00:00",
            dst="elapsed",
            dst_rule="fixed period counted from the Unix epoch; DST changes do not matter",
        )
        return out
    fields = []
    for name, spec in zip(_FIELD_NAMES, form.specs, strict=True):
        if name == "second" and form.nfields == 5:
            continue
        entry: dict[str, object] = {"name": name, "text": spec.text, "values": sorted(spec.values)}
        specials = _specials(spec)
        if specials:
            entry["specials"] = specials
        fields.append(entry)
    out.update(
        kind="cron",
        fields_count=form.nfields,
        expanded=form.text if form.text != expr.strip() else None,
        fields=fields,
        day_rule="and" if form.schedule.day_and else "or",
        dst="wall-clock" if form.wallclock else "elapsed",
        dst_rule=(
            "fixed-time job: a time skipped by a spring-forward gap fires when the gap ends; "
            "a repeated time fires once (first occurrence)"
            if form.wallclock
            else "runs in elapsed time: a skipped local time does not fire; a repeated one "
            "fires in both passes"
        ),
    )
    return out


def _specials(spec: FieldSpec) -> list[str]:
    out = [("L" if n == 0 else f"L-{n}") for n in sorted(spec.last)]
    if spec.last_weekday:
        out.append("LW")
    out += [f"{n}W" for n in sorted(spec.nearest)]
    out += [f"{d}L" for d in sorted(spec.last_dow)]
    out += [f"{DAY_NAMES[d]}#{n}" for d, n in sorted(spec.nth)]
    return out
