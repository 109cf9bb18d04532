"""The dashboard's routes: server-rendered pages over the API's context, its tokens, roles
and teams. Reads go through ``views.py`` and ``dashboard/read.py``; every change goes
through ``api/control.py`` or the scheduler's methods, exactly like the REST API, and is
audited the same way. A page asked with ``?partial=1`` answers only its live region (the
polling script replaces it every 2 s)."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from importlib import resources
from itertools import pairwise
from typing import Any
from urllib.parse import quote, unquote, urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.middleware.gzip import GZipMiddleware

from cronfleet.api import control
from cronfleet.api.deps import (
    Context,
    audit,
    declared_here,
    local,
    now,
    ready_context,
    store_errors,
    stored_job,
    team_jobs,
    team_runs,
    visible,
    visible_run,
    who,
)
from cronfleet.api.errors import ApiError
from cronfleet.catalog import SOURCE, SpecInvalid
from cronfleet.dashboard import charts, read
from cronfleet.dashboard.auth import (
    COOKIE,
    PREFS,
    OneTimeCodes,
    csrf_for,
    csrf_ok,
    set_session,
)
from cronfleet.errors import AlreadyExecuting, JobPaused, StoreError
from cronfleet.model import Job, RunRecord, RunStatus, TriggeredBy
from cronfleet.spec import FieldError, time_bound
from cronfleet.store.base import RunCursor, RunFilter
from cronfleet.store.ledger import LATE_RESULT_KEY
from cronfleet.store.side import DefCount, TokenInfo
from cronfleet.views import JobView, job_view, jobs_by_key, run_stats

log = logging.getLogger("cronfleet.dashboard")

__all__ = ["install"]

FLASH = "cronfleet_flash"
REFRESH_MS = 2000


@dataclass
class Session:
    token: str
    info: TokenInfo
    utc: bool

    @property
    def can_edit(self) -> bool:
        return self.info.can("editor")

    @property
    def is_admin(self) -> bool:
        return self.info.can("admin")


class SignIn(Exception):
    """No (valid) session: the page redirects to the sign-in form."""


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- rendering ------------------------------------------------------------------------

_env = Environment(loader=PackageLoader("cronfleet.dashboard", "templates"),
                   autoescape=select_autoescape(["html"]), trim_blocks=True,
                   lstrip_blocks=True)


def _zone(job: Job | None, s: Session | None) -> tzinfo:
    if (s is not None and s.utc) or job is None:
        return UTC
    return job.schedule.tz


TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # the one format of every time the dashboard shows


def fmt_time(t: datetime | None, tz: tzinfo = UTC, zone: bool = True) -> str:
    """``2026-12-01 14:12:05 CET``: every time on every page, to the second, in ``tz``;
    ``zone=False`` leaves the zone out (a table names it once, in its header)."""
    if t is None:
        return "—"
    local = t.astimezone(tz)
    return local.strftime(f"{TIME_FORMAT} %Z" if zone else TIME_FORMAT)


def exact(t: datetime) -> str:
    """The exact instant, in UTC to the microsecond (a time's hover text)."""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def when(t: datetime | None, tz: tzinfo = UTC, zone: bool = True) -> Markup:
    """A time as shown (:func:`fmt_time`) in a ``<time>`` element carrying the exact
    instant: machine-readable, and as the hover text."""
    if t is None:
        return Markup("—")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        t.astimezone(UTC).isoformat(), exact(t), fmt_time(t, tz, zone))


def zone_name(tz: tzinfo) -> str:
    return getattr(tz, "key", None) or ("UTC" if tz is UTC else str(tz))


def table_zone(jobs: Any, s: Session | None) -> tzinfo:
    """The one zone of a table of several jobs' times: the jobs' zone when they share
    one (and the session did not ask for UTC), else UTC."""
    zones: dict[str, tzinfo] = {str(j.schedule.tz): j.schedule.tz for j in jobs
                                if j is not None}
    if (s is not None and s.utc) or len(zones) != 1:
        return UTC
    return next(iter(zones.values()))


_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}(?::\d{2})?)(\.\d+)?"
                  r"(Z|[+-]\d{2}:\d{2})?")


def readable_times(text: str) -> str:
    """ISO instants in a message (an error from deeper down, a stored note) written like
    every other time: ``2026-12-01 14:12:05 UTC``, no microseconds."""
    def one(m: re.Match[str]) -> str:
        try:
            t = datetime.fromisoformat(m.group(0).replace("Z", "+00:00"))
        except ValueError:
            return m.group(0)
        if t.tzinfo is None:
            return t.strftime(TIME_FORMAT)
        return fmt_time(t, UTC)

    return _ISO.sub(one, text)


def relative(t: datetime | None, ref: datetime) -> str:
    if t is None:
        return ""
    secs = (t - ref).total_seconds()
    a = abs(secs)
    if a < 60:
        text = f"{a:.0f}s"
    elif a < 3600:
        text = f"{a / 60:.0f}m"
    elif a < 86400 * 2:
        text = f"{a / 3600:.1f}h"
    else:
        text = f"{a / 86400:.0f}d"
    return f"in {text}" if secs >= 0 else f"{text} ago"


def fmt_secs(v: float | None) -> str:
    if v is None:
        return "—"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 120:
        return f"{v:.2f} s"
    return f"{v / 60:.1f} min"


_EPOCH_NOTE = " (slots counted from 1970-01-01 00:00 UTC)"


def describe(job: Job) -> str:
    """The schedule in words; an interval's slots are aligned to the epoch, which the
    page says in the schedule's hover text, not in every description."""
    try:
        text = job.schedule.describe()
    except Exception:  # a description never breaks a page
        return job.schedule.expr
    return text.removesuffix(_EPOCH_NOTE)


_CELL = {st: f"<i class={code}></i>" for st, code in read.CELL_CODES.items()}


def cells_html(cells: read.Timeline) -> Markup:
    """The timeline's cells (up to 10,000): one empty element per slot, its state's code
    (``read.CELL_CODES``) as its class and nothing else; the slot times and run ids are
    in :func:`cells_data`, and the details of a run are fetched when its cell is hovered
    or reached by keyboard (``/runs/{id}/label``). 16 bytes a cell, 6x less than a titled link."""
    cell = _CELL
    return Markup("".join([cell[st] for st in cells.states]))


def cells_data(cells: read.Timeline, tz: tzinfo) -> Markup:
    """The timeline's data for the script: ``t0`` (the first slot, epoch seconds),
    ``dt`` (each slot's distance from the one before, seconds: mostly one repeated
    number), ``runs`` (each slot's run id, 0 for none, as the difference from the
    previous run id: mostly 1) and the zone to show times in. In ``dt`` and ``runs`` a
    pair ``[v, n]`` stands for ``v`` repeated ``n`` times (a 7-day timeline of a job
    firing every minute: ~50 KB of numbers become a few bytes)."""
    times = [int(at) for at in cells.stamps]
    dt = [b - a for a, b in pairwise(times)]
    runs: list[int] = []
    prev = 0
    for rid in cells.run_ids:
        if rid:
            runs.append(rid - prev)
            prev = rid
        else:
            runs.append(0)
    zone = getattr(tz, "key", None) or ("UTC" if tz is UTC else str(tz))
    data = (f'{{"t0":{times[0] if times else 0},"tz":{json.dumps(zone)},'
            f'"dt":[{_repeats(dt)}],"runs":[{_repeats(runs)}]}}')
    # JSON in a script element: "</" cannot occur (numbers and a zone name) but be sure
    return Markup(data.replace("</", "<\\/"))


def _repeats(values: list[int]) -> str:
    """``values`` as JSON array items, a run of 3 or more equal values as ``[v,n]``."""
    out: list[str] = []
    i, n = 0, len(values)
    while i < n:
        v = values[i]
        j = i + 1
        while j < n and values[j] == v:
            j += 1
        out.append(f"[{v},{j - i}]" if j - i >= 3 else ",".join([str(v)] * (j - i)))
        i = j
    return ",".join(out)


def heat_row(row: read.HeatRow, start: float, tz: tzinfo) -> dict[str, Any]:
    """One job's row of the overview's heat map: ``cells``, an empty element a minute
    whose class is the ledger's worst verdict of that minute's slots (its code, as
    in a timeline: 16 bytes a cell); ``runs``, the run each cell shows (``12,,14``: the script
    opens it on a click and titles the cell on hover); ``summary``, the row in words."""
    del start, tz  # the script names each cell's minute from the map's start
    cells = "".join([_CELL[st] for st in row.states])
    runs = ",".join([str(r) if r else "" for r in row.runs])
    counts = Counter(st for st in row.states if st != "none")
    summary = (", ".join(f"{n} {st}" for st, n in counts.most_common()) or
               "nothing recorded")
    return {"id": row.job_id, "cells": Markup(cells), "runs": runs,
            "summary": f"{row.job_id}, minutes of the last hour: {summary}"}


def fmt_iso(value: Any, tz: tzinfo = UTC) -> Markup | str:
    """An ISO time as stored (a backfill's range, an HTTP attempt's start, a late
    result's end) shown like the others."""
    if value is None:
        return "—"
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return when(t if t.tzinfo is not None else t.replace(tzinfo=UTC), tz)


def short_source(source: str) -> str:
    """A config file's name and line rather than its whole path."""
    return source.rsplit("/", 1)[-1] if "/" in source else source


_env.tests["cut_line"] = read.is_cut_mark
_env.filters.update(short_source=short_source, secs=fmt_secs, q=lambda v: quote(str(v), safe=""))
_env.globals.update(cells_html=cells_html, cells_data=cells_data, fmt_time=fmt_time,
                    fmt_iso=fmt_iso, when=when, zone_name=zone_name,
                    at_ts=lambda x: datetime.fromtimestamp(x, UTC),
                    tz_of=lambda j: zone_name(j.schedule.tz),
                    cell_states=read.CELL_STATES,
                    relative=relative, describe=describe,
                    kind=read.job_kind, urlencode=urlencode, REFRESH_MS=REFRESH_MS,
                    windows=list(read.WINDOWS), statuses=[s.value for s in RunStatus],
                    json=lambda v: json.dumps(v, indent=2, sort_keys=True, default=str))


def render(request: Request, name: str, s: Session | None, status: int = 200,
           **ctx: Any) -> HTMLResponse:
    partial = request.query_params.get("partial") == "1" and name in _LIVE
    template = _env.get_template(f"_{name}" if partial else name)
    flash = request.cookies.get(FLASH)
    flash_bad = False
    if flash:
        flash = unquote(flash)
        flash_bad = flash.startswith("!")  # a refusal: shown as one, not as a success
        flash = flash.removeprefix("!")
    # a page answering a form (the job page with the backfill form's errors) says where
    # it lives, for its live region and its forms' way back
    ctx.setdefault("path", request.url.path)
    query = urlencode([(k, v) for k, v in request.query_params.multi_items()
                       if k != "partial"])
    ctx.setdefault("full_path", str(request.url.path) + (f"?{query}" if query else ""))
    html = template.render(request=request, s=s, csrf=csrf_for(s.token) if s else "",
                           flash=None if partial else flash, flash_bad=flash_bad, **ctx)
    resp = HTMLResponse(html, status_code=status,
                        headers={"Cache-Control": "no-store",
                                 "Content-Security-Policy": CSP,
                                 "X-Content-Type-Options": "nosniff",
                                 "Referrer-Policy": "same-origin"})
    if flash and not partial:
        resp.delete_cookie(FLASH, path="/")
    return resp


_LIVE = {"overview.html", "jobs.html", "job.html", "run.html", "runs.html", "error.html",
         "backfill.html"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


def redirect(to: str, flash: str | None = None, bad: bool = False) -> RedirectResponse:
    """A 303 to ``to`` (a local path only) with a message for the next page; ``bad``: a
    refusal or an error (shown in red as an alert), else a confirmation."""
    local = to.startswith("/") and not to.startswith(("//", "/\\"))
    resp = RedirectResponse(to if local else "/", status_code=303)
    if flash:  # percent-encoded: a cookie is latin-1 at best (a job id, a quote mark)
        text = ("!" if bad else "") + readable_times(flash)[:500]
        resp.set_cookie(FLASH, quote(text, safe=""), path="/", httponly=True,
                        samesite="strict")
    return resp


# -- sessions -------------------------------------------------------------------------


async def session(request: Request) -> Session:
    ctx: Context = request.app.state.cronfleet
    token = request.cookies.get(COOKIE)
    if not token:
        raise SignIn
    try:
        info = await ctx.api_store.authenticate(token)
    except StoreError as exc:
        raise Refused(503, f"cannot check the session: {exc}") from None
    if info is None:
        raise SignIn
    return Session(token, info, request.cookies.get(PREFS) == "1")


async def form_of(request: Request, s: Session) -> Any:
    """The posted form, once its CSRF token and origin are checked."""
    form = await request.form()
    sent = form.get("csrf") or request.headers.get("x-csrf-token")
    if not csrf_ok(request, s.token, sent if isinstance(sent, str) else None):
        raise Refused(403, "the form's CSRF token is missing or wrong (reload the page "
                           "and try again)")
    return form


def need(s: Session, role: str) -> None:
    if not s.info.can(role):
        raise Refused(403, f"token {s.info.name!r} has role {s.info.role}; this needs {role}")


Page = Callable[[Request, Session, Context], Awaitable[Response]]


def page(fn: Page) -> Callable[[Request], Awaitable[Response]]:
    """A page or action: the session (else the sign-in form), the context, and errors as
    pages (an ApiError keeps its status: another team's job is a 404 here too)."""

    async def handler(request: Request) -> Response:
        s: Session | None = None
        try:
            s = await session(request)
            ctx = await ready_context(request)
            return await fn(request, s, ctx)
        except SignIn:
            if request.query_params.get("partial") == "1" or request.method != "GET":
                return HTMLResponse("signed out", status_code=401)
            nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return redirect("/signin?" + urlencode({"next": nxt}))
        except ApiError as exc:
            return render(request, "error.html", s, status=exc.status,
                          title=f"{exc.status}", message=exc.message)
        except Refused as exc:
            return render(request, "error.html", s, status=exc.status,
                          title=f"{exc.status}", message=exc.message)
        except StoreError as exc:
            return render(request, "error.html", s, status=503, title="503",
                          message=f"the store did not answer: {exc}")
        except Exception:  # a defect: still a dashboard page, and the traceback logged
            ref = f"{int(datetime.now(UTC).timestamp() * 1000):x}"
            log.exception("dashboard: %s %s failed (reference %s)", request.method,
                          request.url.path, ref)
            return render(request, "error.html", s, status=500, title="500",
                          message="the dashboard failed to build this page; the error is "
                                  f"in the server's log (reference {ref})")

    handler.__name__ = fn.__name__
    return handler


# -- pages ----------------------------------------------------------------------------


async def overview_page(request: Request, s: Session, ctx: Context) -> Response:
    t = now(ctx)
    jobs = [j for j in ctx.scheduler.iter_jobs() if j.team == s.info.team]
    data = await read.overview(ctx.scheduler.store, jobs, t)
    with store_errors("cannot count the jobs"):  # every stored job, held here or not
        count = await ctx.api_store.count_job_defs(s.info.team)
    total = sum(1 for j in jobs if j.source != SOURCE) + count.n
    data["jobs"] = ("~" if count.estimated else "") + f"{total:,}"
    health = ctx.scheduler.health()
    store_ok = True
    store_error = None
    try:
        await ctx.scheduler.store.read_states([])
    except StoreError as exc:
        store_ok, store_error = False, str(exc)
    sched = ctx.scheduler
    instances: list[read.InstanceRow] | None = None
    fleet_error = None
    try:
        instances = await read.fleet(sched.store, sched.instance_ttl, sched.instance_id,
                                     sched.clock.now, data["running_all"])
    except StoreError as exc:
        fleet_error = str(exc)
    p = request.query_params
    window = p.get("window", "1h") if p.get("window") in read.ACTIVITY else "1h"
    try:
        hm_page = max(1, int(p.get("hm", "1")))
    except ValueError:
        hm_page = 1
    act_ = await read.activity(sched.store, jobs, health["jobs"], t, data["lasts"],
                               window=window, page=hm_page)
    tz = table_zone(jobs, s) if len(jobs) < 1000 else UTC
    return render(request, "overview.html", s, t=t, data=data, health=health,
                  act=act_, window=window, tz=tz,
                  heat=[heat_row(h, act_.start, tz) for h in act_.rows],
                  chart=charts.activity_chart(act_.buckets, act_.chart_start, act_.bucket,
                                              tz),
                  store_ok=store_ok, store_error=store_error,
                  store_url=_safe_url(sched.store.url), instances=instances,
                  fleet_error=fleet_error, ttl=sched.instance_ttl)


def _safe_url(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://…@{rest.split('@', 1)[1]}"
    return url


async def jobs_page(request: Request, s: Session, ctx: Context) -> Response:
    t = now(ctx)
    query = read.JobsQuery.from_params(request.query_params)
    sched = ctx.scheduler
    next_of = None
    due = getattr(sched, "due", None)
    queued = getattr(due, "next", None) if due is not None else None
    if isinstance(queued, dict):
        next_of = queued.get
    team = s.info.team
    declared = [j for j in declared_here(ctx) if j.team == team]
    with store_errors("cannot read the jobs"):
        count = await ctx.api_store.count_job_defs(team)
        small = not count.estimated and count.n + len(declared) <= SMALL_TEAM
        if small and not query.after:  # every job at hand: any sort, numbered pages
            ids = {j.id for j in declared}
            defs = await ctx.api_store.job_defs_page(team, limit=SMALL_TEAM)
            jobs = declared + [j for d in defs if d.id not in ids
                               and (j := stored_job(ctx, d)) is not None]
            result = await read.jobs_page(sched.store, jobs, team, query, t,
                                          next_of=next_of)
        else:
            result = await _jobs_by_key(ctx, team, declared, query, t, count)
    return render(request, "jobs.html", s, t=t, query=query, result=result,
                  tz=table_zone([r.job for r in result.rows], s))


SMALL_TEAM = 1000
"""A team with at most this many jobs gets every sort and numbered pages on the jobs list
(its stored jobs are all built for it); a larger one pages by id (:func:`_jobs_by_key`)."""


async def _jobs_by_key(ctx: Context, team: str, declared: list[Job], query: read.JobsQuery,
                       t: datetime, count: DefCount) -> read.JobsPage:
    """A large team's jobs list: one keyset page in id order after ``query.after``
    (declared jobs merged with the stored definitions read by ``(team, id)``), filtered
    by a bounded scan (``views.jobs_by_key``); sorted by id only, counted by the store's
    estimate."""
    statuses: set[RunStatus] | None = set(read.FAILED_STATUSES) if query.failing else None
    if query.status:
        statuses = {RunStatus(query.status)} & (statuses or {RunStatus(query.status)})

    def where(j: Job) -> bool:
        return ((not query.kind or read.job_kind(j) == query.kind) and
                (not query.source or j.source == query.source
                 or read.source_file(j.source) == query.source))

    views: list[JobView] = []
    nxt = None
    if statuses is None or statuses:  # (a status that is not failing, with failing: none)
        views, nxt = await jobs_by_key(
            ctx.scheduler.store, declared, ctx.api_store, lambda d: stored_job(ctx, d), t,
            team=team, limit=query.size, after=query.after, text=query.q or None,
            paused=None if not query.paused else query.paused == "yes",
            statuses=statuses, where=where if query.kind or query.source else None)
    # the views read each job's state and last run already: not read again
    rows = await read.job_rows(
        ctx.scheduler.store, [v.job for v in views], t,
        lasts={v.job.id: v.last for v in views if v.last is not None},
        states={v.job.id: v.state for v in views if v.state is not None})
    sources = sorted({read.source_file(j.source) for j in declared} | {SOURCE})
    total = len(declared) + count.n
    return read.JobsPage(rows, total, 1, sources, keyset=True, next_after=nxt,
                         count=("~" if count.estimated else "") + f"{total:,}")


async def job_page(request: Request, s: Session, ctx: Context) -> Response:
    job = await visible(ctx, s.info, request.path_params["job_id"])
    return await _job_page(request, s, ctx, job)


async def _job_page(request: Request, s: Session, ctx: Context, job: Job, status: int = 200,
                    backfill: BackfillForm | None = None, at: str | None = None
                    ) -> Response:
    """The job page; ``backfill``: the backfill form as sent, with its errors (422);
    ``at``: the page's own path when it answers a form posted elsewhere."""
    t = now(ctx)
    store = ctx.scheduler.store
    window = request.query_params.get("window", "24h")
    where = {} if at is None else {"path": at, "full_path": at}
    if window not in read.WINDOWS:
        window = "24h"
    states = await store.read_states([job.id])
    recent = await store.list_runs(job.id, limit=100)
    view = job_view(job, states.get(job.id), recent[0] if recent else None, t)
    st = states.get(job.id)
    cells, cut = await read.timeline(store, job, t, window,
                                     since=None if st is None else st.created_at)
    counts = Counter(cells.states)
    spec = None
    if job.source == SOURCE:
        d = await ctx.api_store.job_def(job.id)
        spec = None if d is None else d.spec
    tz = _zone(job, s)
    return render(request, "job.html", s, status=status, t=t, job=job,
                  backfill=backfill or BackfillForm(),
                  running=[r for r in recent if not r.status.finished], view=view,
                  state=view.state,
                  window=window, cells=cells, cut=cut, counts=counts, tz=tz,
                  fires=read.next_fire_marks(job, t, 10),
                  pct=read.duration_percentiles(recent),
                  daily=read.daily_percentiles(recent, tz),
                  stats=run_stats(recent), recent=recent[:15],
                  config=config_rows(spec if spec is not None else _declared(job)),
                  stored=spec is not None, editable=job.source == SOURCE,
                  lease=view.lease_holder(t), paused=view.paused(t),
                  status_word=read.job_status(view, t), next_run=view.next_run(t),
                  enabled=view.enabled(t),
                  durations=charts.durations_chart(read.duration_points(recent), tz,
                                                   f"Durations of the last {len(recent)} runs"),
                  override=view.override_active(t), **where)


def _declared(job: Job) -> dict[str, Any]:
    """A declared job's configuration as the page shows it: what it runs (an HTTP job's
    method and URL, a command), when, and its policies, as plain values."""
    from dataclasses import asdict, is_dataclass

    from cronfleet.jobs.command import CommandJob
    from cronfleet.jobs.http import HttpJob
    from cronfleet.store.url import redact_url

    out: dict[str, Any] = {"schedule": job.schedule_text or job.schedule.expr,
                           "timezone": str(job.schedule.tz)}
    h = job.handler
    if isinstance(h, HttpJob):
        out["http"] = {"method": h.method, "url": redact_url(h.url),
                       **({"headers": sorted(h.headers)} if h.headers else {}),
                       **({"body": f"{len(h.body)} characters"} if h.body else {}),
                       "timeout": h.timeout}
    elif isinstance(h, CommandJob):
        out["command"] = h.command if isinstance(h.command, str) else list(h.command)
        out["shell"] = h.shell
        if h.cwd:
            out["cwd"] = h.cwd
    else:
        name = getattr(h, "__qualname__", None) or type(h).__qualname__
        out["handler"] = f"{getattr(h, '__module__', '?')}:{name}"
    out.update({"source": job.source, "team": job.team, "enabled": job.enabled,
                "missed": job.missed.value, "catch_up_window": job.catch_up_window,
                "overlap": job.overlap.value, "locking": job.locking.value,
                "timeout": job.timeout, "jitter": job.jitter, "recover": job.recover,
                "retry": asdict(job.retry) if is_dataclass(job.retry) else job.retry,
                "auto_pause_after": job.auto_pause_after,
                "max_instances": job.max_instances})
    if job.config:
        out["config"] = dict(job.config)
    return out


def config_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    """``key = value`` lines of a configuration (nested tables as ``http.url``), the
    values as TOML would write them; unset (None) fields are left out."""
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict) and v:
            for k, sub in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), sub)
        elif v is not None:
            rows.append((prefix, json.dumps(v, default=str, ensure_ascii=False)))

    walk("", d)
    return rows


async def run_page(request: Request, s: Session, ctx: Context) -> Response:
    run = await _run_of(request, s, ctx)
    job = local(ctx, run.job_id)
    from cronfleet.attempts import attempts_of

    return render(request, "run.html", s, run=run, job=job, tz=_zone(job, s), t=now(ctx),
                  tries=attempts_of(run),
                  command=job is not None and read.job_kind(job) == "command",
                  result=json.dumps(run.result, indent=2, default=str)
                  if run.result is not None else None, **run_details(run.result))


async def run_label(request: Request, s: Session, ctx: Context) -> Response:
    """A timeline cell's details, fetched when it is hovered or reached by keyboard: the
    run's outcome, reason, duration and error (as its title used to carry), scoped to
    the session's team like the run page (another team's run: 404)."""
    try:
        run_id = int(request.path_params["run_id"])
    except ValueError:
        raise Refused(404, "no such run") from None
    run = await visible_run(ctx, s.info, run_id)
    return JSONResponse({"id": run.id, "state": read.cell_state(run),
                         "label": read.Cell(run.slot, read.cell_state(run), run).label},
                        headers={"Cache-Control": "no-store"})


def run_details(result: Any) -> dict[str, Any]:
    """What the run page shows apart from the stored result: an HTTP job's attempts
    (request and response as stored, already redacted) and a fenced holder's late
    result (``result.late_result``)."""
    if not isinstance(result, dict):
        return {"attempts": [], "late": None}
    attempts = [a for a in result.get("attempts") or [] if isinstance(a, dict)
                and isinstance(a.get("request"), dict)]
    late = result.get(LATE_RESULT_KEY)
    return {"attempts": attempts, "late": late if isinstance(late, dict) else None}


async def _run_of(request: Request, s: Session, ctx: Context) -> RunRecord:
    try:
        run_id = int(request.path_params["run_id"])
    except ValueError:
        raise Refused(404, "no such run") from None
    return await visible_run(ctx, s.info, run_id)


async def cancel_page(request: Request, s: Session, ctx: Context) -> Response:
    """The confirmation of a cancel (editor): what will be stopped, a reason, one button."""
    run = await _run_of(request, s, ctx)
    need(s, "editor")
    job = local(ctx, run.job_id)
    return render(request, "cancel.html", s, run=run, tz=_zone(job, s))


async def cancel_post(request: Request, s: Session, ctx: Context) -> Response:
    """Cancel a run wherever it executes (``control.cancel_run``, as the API's
    ``POST /api/runs/{id}/cancel``); the outcome is shown on the run's page."""
    form = await form_of(request, s)
    need(s, "editor")
    run = await _run_of(request, s, ctx)
    back = f"/runs/{run.id}"
    if run.status.finished:
        return redirect(back, f"run #{run.id} is not running (it ended: "
                              f"{run.status.value}); nothing was cancelled", bad=True)
    why = str(form.get("why", "")).strip()[:500] or "no reason given"
    try:
        how = await control.cancel_run(ctx, run, by=who(s.info), why=why)
    except ApiError as exc:
        if exc.status != 409:
            raise
        await audit(ctx, s.info, "run.cancel", run.job_id,
                    {"run_id": run.id, "refused": exc.code, "via": "dashboard"})
        return redirect(back, f"run #{run.id} was not cancelled: {exc.message} ({exc.code})",
                        bad=True)
    await audit(ctx, s.info, "run.cancel", run.job_id,
                {"run_id": run.id, "why": why, "via": "dashboard"})
    return redirect(back, f"run #{run.id} cancelled: {how}")


@dataclass
class BackfillForm:
    """The backfill form as sent (``from``, ``to``, only missing) and its errors by field
    (``from``, ``to``, ``_`` for the whole)."""

    start: str = ""
    end: str = ""
    only_missing: bool = False
    errors: dict[str, str] = field(default_factory=dict)


async def backfill_post(request: Request, s: Session, ctx: Context) -> Response:
    """Backfill a range of the job's slots (``control.backfill``, as the API's ``POST
    /api/jobs/{id}/backfill``): times in the job's zone (or a duration back from now);
    a wrong field is shown at the field on the job page (422); then the backfill's page."""
    form = await form_of(request, s)
    need(s, "editor")
    job = await visible(ctx, s.info, str(form.get("job_id", "")))
    f = BackfillForm(str(form.get("from", "")).strip()[:100],
                     str(form.get("to", "")).strip()[:100], form.get("only_missing") == "1")
    t = now(ctx)
    bounds: dict[str, datetime] = {}
    for key, value in (("from", f.start), ("to", f.end)):
        if not value:
            f.errors[key] = f"{key}: required (a time in {job.schedule.tz}, or 2h, 1d back)"
            continue
        try:
            bounds[key] = time_bound(value, now=t, tz=job.schedule.tz)
        except FieldError as exc:
            f.errors[key] = f"{key}: {exc.message}"
    got = None
    if not f.errors:
        try:
            got, slots = await control.backfill(ctx, job, bounds["from"], bounds["to"],
                                                by=who(s.info), only_missing=f.only_missing,
                                                rate=BACKFILL_RATE)
        except ApiError as exc:
            errs = (exc.details or {}).get("errors") or []
            where = errs[0].get("field") if errs else None
            f.errors[where if where in ("from", "to") else "_"] = exc.message
        else:
            await audit(ctx, s.info, "job.backfill", job.id, {
                "backfill_id": got.id, "from": bounds["from"].isoformat(),
                "to": bounds["to"].isoformat(), "slots": slots,
                "only_missing": f.only_missing, "instance": got.taken_by,
                "via": "dashboard"})
    if got is None:
        return await _job_page(request, s, ctx, job, status=422, backfill=f,
                               at=f"/jobs/{quote(job.id, safe='')}")
    return redirect(f"/backfills/{got.id}",
                    f"backfill {got.id} of {job.id}: {slots} slot{'s' if slots != 1 else ''}, "
                    f"taken by {got.taken_by}")


BACKFILL_RATE = 10.0  # slots started a second at most (the API's default)


async def _backfill_of(request: Request, s: Session, ctx: Context) -> Any:
    from cronfleet.api.backfills import visible_backfill

    try:
        bid = int(request.path_params["backfill_id"])
    except ValueError:
        raise Refused(404, "no such backfill") from None
    return await visible_backfill(ctx, s.info, bid)


async def backfill_page(request: Request, s: Session, ctx: Context) -> Response:
    """A backfill's progress, refreshed every 2 s until it ends; cancel (editor)."""
    from cronfleet.api.backfills import backfill_out

    req = await _backfill_of(request, s, ctx)
    job = local(ctx, req.job_id)
    return render(request, "backfill.html", s, b=backfill_out(req), tz=_zone(job, s),
                  t=now(ctx))


async def backfill_cancel(request: Request, s: Session, ctx: Context) -> Response:
    form = await form_of(request, s)
    del form
    need(s, "editor")
    req = await _backfill_of(request, s, ctx)
    back = f"/backfills/{req.id}"
    try:
        await control.cancel_backfill(ctx, req.id, by=who(s.info))
    except ApiError as exc:
        if exc.status != 409:
            raise
        return redirect(back, f"backfill {req.id} was not cancelled: {exc.message}",
                        bad=True)
    await audit(ctx, s.info, "job.backfill.cancel", req.job_id,
                {"backfill_id": req.id, "via": "dashboard"})
    return redirect(back, f"backfill {req.id} cancelled: the slot under way ends, no "
                          "later slot runs")


async def runs_page(request: Request, s: Session, ctx: Context) -> Response:
    p = request.query_params
    status = p.get("status", "")
    st = RunStatus(status) if status in {x.value for x in RunStatus} else None
    job_id = p.get("job", "").strip() or None
    instance = p.get("instance", "").strip()[:200] or None
    since_key = p.get("since", "")
    t = now(ctx)
    spans = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
    since = (datetime.fromtimestamp(t.timestamp() - spans[since_key], UTC)
             if since_key in spans else None)
    scope: frozenset[str] | None
    if job_id is not None:
        await visible(ctx, s.info, job_id)  # another team's job: 404
        scope = frozenset((job_id,))  # one job's runs: not the team's ids (as GET /api/runs)
    else:
        scope = await team_jobs(ctx, s.info)
    if scope is None:  # a team with many stored jobs: its runs kept page by page
        try:
            after = RunCursor.decode(p["cursor"]) if p.get("cursor") else None
        except ValueError:
            after = None
        found, at = await team_runs(ctx, s.info.team, RunFilter(
            status=st, instance_id=instance, since=since), 50, after)
        runs, nxt = found, None if at is None else at.encode()
    else:
        runs, nxt = await read.find_runs(ctx.scheduler.store, scope,
                                         job_id=job_id, status=st, instance=instance,
                                         since=since, cursor=p.get("cursor"),
                                         # the count, not a copy of the job table
                                         all_ids=ctx.scheduler.health()["jobs"])
    params = {k: v for k, v in (("status", status), ("job", job_id or ""),
                                ("instance", instance or ""), ("since", since_key)) if v}
    return render(request, "runs.html", s, t=t, runs=runs, status_filter=status,
                  job_id=job_id or "", instance=instance or "", since=since_key,
                  next_cursor=nxt, params=params,
                  tz=table_zone({local(ctx, r.job_id) for r in runs} - {None}, s))


AUDIT_ACTIONS = ("job.pause", "job.resume", "job.clear_override", "job.trigger",
                 "job.backfill", "job.backfill.cancel", "job.create", "job.update",
                 "job.delete", "run.cancel", "secret.set", "secret.delete", "token.create",
                 "token.revoke")
AUDIT_SCAN = 2000  # entries read at most to fill one filtered page


async def audit_page(request: Request, s: Session, ctx: Context) -> Response:
    """The team's audit log, newest first, 50 a page; filtered by action, actor and
    target (read in pages of 200 until 50 match or 2,000 were read)."""
    need(s, "admin")
    p = request.query_params
    cursor = p.get("cursor")
    before = int(cursor) if cursor and cursor.isdigit() else None
    filters = {"action": p.get("action", "").strip()[:100],
               "actor": p.get("actor", "").strip()[:100],
               "target": p.get("target", "").strip()[:200]}

    def keep(e: Any) -> bool:
        return ((not filters["action"] or e.action == filters["action"]) and
                (not filters["actor"] or filters["actor"].lower() in (e.actor or "").lower())
                and (not filters["target"] or
                     filters["target"].lower() in (e.target or "").lower()))

    entries: list[Any] = []
    scanned = 0
    more = False
    last_id: int | None = None
    while True:
        page_ = await ctx.api_store.audit_entries(s.info.team, limit=200, before_id=before)
        for e in page_:
            scanned += 1
            last_id = e.id
            if keep(e):
                entries.append(e)
                if len(entries) == 51:
                    break
        if len(entries) > 50:
            more, entries = True, entries[:50]
            last_id = entries[-1].id
            break
        if len(page_) < 200:
            break
        if scanned >= AUDIT_SCAN:
            more = True
            break
        before = page_[-1].id
    return render(request, "audit.html", s, entries=entries, filters=filters,
                  filter_params={k: v for k, v in filters.items() if v},
                  actions=sorted(set(AUDIT_ACTIONS) | {e.action for e in entries}),
                  scanned=scanned, scanned_more=more and len(entries) < 50,
                  next_cursor=last_id if more else None, tz=_zone(None, s),
                  detail_rows=detail_rows)


def detail_rows(details: Any) -> list[tuple[str, str]]:
    """An audit entry's details as ``name: value`` lines (times readable, lists joined)."""
    if not isinstance(details, dict):
        return [("", readable_times(str(details)))]
    out = []
    for k, v in details.items():
        if isinstance(v, list | tuple):
            text = ", ".join(str(x) for x in v) or "—"
        elif isinstance(v, dict):
            text = ", ".join(f"{a}: {b}" for a, b in v.items()) or "—"
        elif v is None:
            text = "—"
        else:
            text = str(v)
        out.append((str(k).replace("_", " "), readable_times(text)))
    return out


async def secrets_page(request: Request, s: Session, ctx: Context) -> Response:
    return await _secrets(request, s, ctx)


async def _secrets(request: Request, s: Session, ctx: Context, status: int = 200,
                   name: str = "", hosts: str = "", error: str | None = None) -> Response:
    """The secrets page; the set form only when the vault has a key (else what to set);
    ``name``, ``hosts``, ``error``: a refused form as it was typed."""
    vault = ctx.get_vault()
    entries = await vault.entries(s.info.team)
    return render(request, "secrets.html", s, status=status, entries=entries,
                  tz=_zone(None, s), unlocked=vault_unlocked(vault), form_name=name,
                  form_hosts=hosts, form_error=error)


def vault_unlocked(vault: Any) -> bool:
    """Whether the vault has a key to encrypt with (``CRONFLEET_SECRET_KEY``)."""
    keyring = getattr(vault, "keyring", None)
    return keyring is None or keyring.current is not None


async def tokens_page(request: Request, s: Session, ctx: Context) -> Response:
    need(s, "admin")
    tokens = await ctx.api_store.list_tokens(s.info.team)
    return render(request, "tokens.html", s, tokens=tokens, tz=_zone(None, s),
                  created=None)


# -- actions --------------------------------------------------------------------------


async def act(request: Request, s: Session, ctx: Context) -> Response:
    """Pause / resume / clear / trigger one job or several (bulk: a note is required)."""
    form = await form_of(request, s)
    need(s, "editor")
    action = str(form.get("action", ""))
    ids = [str(v) for v in form.getlist("job_id") if str(v)]
    back = str(form.get("next", "/jobs"))
    note = str(form.get("note", "")).strip() or None
    until_text = str(form.get("until", "")).strip() or None
    if action not in ("pause", "resume", "clear", "trigger"):
        raise Refused(400, f"unknown action {action!r}")
    if not ids:
        return redirect(back, "select at least one job", bad=True)
    bulk = len(ids) > 1 or form.get("bulk") == "1"
    if (action == "pause" or bulk) and not note:
        return redirect(back, f"{action}: a note is required (say why)", bad=True)
    jobs = [await visible(ctx, s.info, i) for i in ids]  # another team's job: 404
    done: list[str] = []
    problems: list[str] = []
    t = now(ctx)
    params: dict[str, str] | None = None
    force = form.get("force") == "1"
    if action == "trigger":
        try:
            params = trigger_params(form.getlist("param_key"), form.getlist("param_value"))
        except ValueError as exc:
            return redirect(back, f"trigger: {exc}; nothing ran", bad=True)
    for job in jobs:
        if action == "trigger":
            try:
                run = await ctx.scheduler.trigger_async(job.id, by=who(s.info),
                                                        triggered_by=TriggeredBy.API,
                                                        params=params, force=force)
            except JobPaused as exc:
                await audit(ctx, s.info, "job.trigger", job.id,
                            {"refused": "paused", "note": note})
                till = "" if exc.until is None else \
                    f" until {fmt_time(exc.until, _zone(job, s))}"
                problems.append(f"{job.id}: paused by {exc.by or 'unknown'}{till}"
                                f"{': ' + exc.note if exc.note else ''} (409); tick "
                                "“Force” to run it anyway")
                continue
            except AlreadyExecuting as exc:
                await audit(ctx, s.info, "job.trigger", job.id,
                            {"refused": "already_executing", "holder": exc.holder,
                             "note": note})
                problems.append(f"{job.id}: already running, the lease is held by "
                                f"{exc.holder or 'another process'} (409)")
                continue
            except StoreError as exc:
                problems.append(f"{job.id}: cannot claim the run: {exc}; nothing ran")
                continue
            details: dict[str, Any] = {"run_id": run.id, "note": note, "via": "dashboard"}
            if run.forced_by is not None:
                details["forced"] = True
            if params:
                details["params"] = sorted(params)  # the keys: values may be sensitive
            await audit(ctx, s.info, "job.trigger", job.id, details)
            done.append(f"{job.id} (run {run.id}{', forced' if run.forced_by else ''})")
            continue
        # resume ends the pause: the job goes back to what its declaration says; only a
        # job declared disabled is forced on (else it could not run at all)
        enabled = {"pause": False, "resume": None if job.enabled else True,
                   "clear": None}[action]
        try:
            until = control.until_time(enabled, until_text, job, t) \
                if enabled is not None else None
        except ApiError as exc:
            return redirect(back, exc.message, bad=True)
        await control.set_override(ctx, job, enabled, by=who(s.info), note=note, until=until)
        await audit(ctx, s.info, {"pause": "job.pause", "resume": "job.resume",
                                  "clear": "job.clear_override"}[action], job.id,
                    {"note": note, "until": None if until is None else until.isoformat(),
                     "via": "dashboard"})
        done.append(job.id)
    verb = {"pause": "paused", "resume": "resumed", "clear": "override cleared for",
            "trigger": "triggered"}[action]
    msg = (f"{verb} {', '.join(done)}" if done else "") + \
        ("; " if done and problems else "") + "; ".join(problems)
    return redirect(back, msg, bad=bool(problems))


MAX_PARAMS = 50


def trigger_params(keys: list[Any], values: list[Any]) -> dict[str, str] | None:
    """The run-now form's parameter rows (``key`` = ``value``, both text) as the run's
    ``params``; blank rows are ignored, None when there are none. A value with no key, a
    key given twice or too many rows is a ValueError naming the row."""
    out: dict[str, str] = {}
    for n, (k, v) in enumerate(zip(keys, values, strict=False), 1):
        key, value = str(k).strip(), str(v)
        if not key and not value.strip():
            continue
        if not key:
            raise ValueError(f"parameter row {n}: the value {value[:40]!r} has no name")
        if len(key) > 100:
            raise ValueError(f"parameter row {n}: the name is longer than 100 characters")
        if key in out:
            raise ValueError(f"parameter row {n}: {key!r} is given twice")
        if len(value) > 4096:
            raise ValueError(f"parameter {key!r}: the value is longer than 4096 characters")
        out[key] = value
    if len(out) > MAX_PARAMS:
        raise ValueError(f"{len(out)} parameters: at most {MAX_PARAMS}")
    return out or None


_EDIT_FIELDS = ("schedule", "timezone", "description", "timeout")


async def edit_page(request: Request, s: Session, ctx: Context) -> Response:
    job = await visible(ctx, s.info, request.query_params.get("job", ""))
    need(s, "editor")
    d = await ctx.api_store.job_def(job.id) if job.source == SOURCE else None
    if d is None:
        raise Refused(409, f"job {job.id!r} is declared in {job.source} and is read-only "
                           "here; change its declaration")
    values = _spec_values(d.spec)
    return render(request, "edit.html", s, job=job, values=values, errors={}, top=None)


def _spec_values(spec: dict[str, Any]) -> dict[str, str]:
    sched = spec.get("schedule")
    http = spec.get("http") or {}
    return {"schedule": sched if isinstance(sched, str) else
            " | ".join(sched) if isinstance(sched, list) else "",
            "timezone": str(spec.get("timezone") or ""),
            "description": str(spec.get("description") or ""),
            "timeout": "" if spec.get("timeout") is None else str(spec.get("timeout")),
            "http.url": str(http.get("url") or ""),
            "http.method": str(http.get("method") or "GET")}


async def edit_post(request: Request, s: Session, ctx: Context) -> Response:
    form = await form_of(request, s)
    need(s, "editor")
    job = await visible(ctx, s.info, str(form.get("job_id", "")))
    d = await ctx.api_store.job_def(job.id) if job.source == SOURCE else None
    if d is None:
        raise Refused(409, f"job {job.id!r} is read-only here")
    values = {k: str(form.get(k, "")).strip() for k in (*_EDIT_FIELDS, "http.url",
                                                         "http.method")}
    old = _spec_values(d.spec)
    changes: dict[str, Any] = {}
    for k in _EDIT_FIELDS:
        if values[k] != old[k]:
            changes[k] = values[k] or None
    if values["http.url"] != old["http.url"] or values["http.method"] != old["http.method"]:
        changes["http"] = {"url": values["http.url"], "method": values["http.method"] or "GET"}
    if not changes:
        return redirect(f"/jobs/{quote(job.id, safe='')}", "nothing changed")
    try:
        await ctx.catalog.update(job, changes, s.info.team, who(s.info))
    except SpecInvalid as exc:
        errors: dict[str, str] = {}
        for p in exc.problems:
            key = p.field if p.field in values else p.field.split(".")[0]
            if key == "http":
                key = "http.url"
            msg = p.message + (f" (column {p.column})" if p.column is not None and
                               "(column" not in p.message else "")
            errors.setdefault(key if key in values else "_", msg)
        return render(request, "edit.html", s, status=422, job=job, values=values,
                      errors=errors, top=None)
    except ApiError as exc:
        return render(request, "edit.html", s, status=exc.status, job=job, values=values,
                      errors={}, top=exc.message)
    await audit(ctx, s.info, "job.update", job.id, {"changes": changes, "via": "dashboard"})
    return redirect(f"/jobs/{quote(job.id, safe='')}", f"saved {job.id}")


async def preview(request: Request, s: Session, ctx: Context) -> Response:
    """The edit form's live preview: the API's preview, for the session."""
    from cronfleet.api import cron as cron_api
    from cronfleet.api import schemas as S

    if not csrf_ok(request, s.token, request.headers.get("x-csrf-token")):
        raise Refused(403, "CSRF token missing or wrong")
    try:
        body = await request.json()
        req = S.PreviewRequest.model_validate({"expr": body.get("expr") or None,
                                               "timezone": body.get("timezone") or "UTC",
                                               "count": 5})
        out = await cron_api.preview(req, s.info, ctx)
    except ApiError as exc:
        errs = (exc.details or {}).get("errors") or [{"message": exc.message}]
        return JSONResponse({"valid": False, "error": errs[0].get("message", exc.message),
                             "column": errs[0].get("column")}, status_code=200)
    except Exception as exc:  # a body that is not what the form sends
        return JSONResponse({"valid": False, "error": str(exc)[:300]}, status_code=200)
    return JSONResponse(out)


async def secret_post(request: Request, s: Session, ctx: Context) -> Response:
    from cronfleet.secrets import SecretError, VaultLocked

    form = await form_of(request, s)
    need(s, "admin")
    name = str(form.get("name", "")).strip()
    value = str(form.get("value", ""))
    hosts_text = str(form.get("hosts", "")).strip()
    # blank keeps the hosts the secret has (a new one: none); "-" clears them
    hosts: Any = ... if not hosts_text else [] if hosts_text == "-" else [
        h.strip() for h in hosts_text.replace("\n", ",").split(",") if h.strip()]
    if not value:
        return await _secrets(request, s, ctx, status=422, name=name, hosts=hosts_text,
                              error="value: empty; nothing stored")
    try:
        created = await ctx.get_vault().set(name, value, s.info.team, hosts=hosts)
    except (VaultLocked, SecretError) as exc:
        # the form comes back with what was typed (never the value)
        return await _secrets(request, s, ctx, status=409 if isinstance(exc, VaultLocked)
                              else 422, name=name, hosts=hosts_text,
                              error=f"{name}: {exc}; nothing stored")
    await audit(ctx, s.info, "secret.set", name,
                {"created": created, "via": "dashboard",
                 **({"hosts": hosts} if hosts is not ... else {})})
    return redirect("/secrets", f"secret {name} {'created' if created else 'rotated'}")


async def token_post(request: Request, s: Session, ctx: Context) -> Response:
    form = await form_of(request, s)
    need(s, "admin")
    action = str(form.get("action", "create"))
    if action == "revoke":
        tid = str(form.get("id", ""))
        mine = {t.id for t in await ctx.api_store.list_tokens(s.info.team)}
        if tid not in mine:
            raise Refused(404, f"no token {tid!r}")
        await ctx.api_store.revoke_token(tid)
        await audit(ctx, s.info, "token.revoke", tid, {"via": "dashboard"})
        return redirect("/tokens", f"token {tid} revoked")
    name = str(form.get("name", "")).strip()
    role = str(form.get("role", "viewer"))
    if not name or len(name) > 100:
        return redirect("/tokens", "name: required, up to 100 characters", bad=True)
    if role not in ("viewer", "editor", "admin"):
        return redirect("/tokens", f"role: {role!r} is not viewer, editor or admin", bad=True)
    plain, info = await ctx.api_store.create_token(name=name, team=s.info.team, role=role,
                                                   created_by=who(s.info))
    await audit(ctx, s.info, "token.create", info.id, {"name": name, "role": role,
                                                        "via": "dashboard"})
    tokens = await ctx.api_store.list_tokens(s.info.team)
    return render(request, "tokens.html", s, tokens=tokens, tz=_zone(None, s),
                  created=(info, plain))


async def prefs_post(request: Request, s: Session, ctx: Context) -> Response:
    form = await form_of(request, s)
    resp = redirect(str(form.get("next", "/")))
    resp.set_cookie(PREFS, "1" if form.get("utc") == "1" else "0", path="/",
                    max_age=365 * 86400, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https")
    return resp


# -- sign-in --------------------------------------------------------------------------


async def signin_form(request: Request) -> Response:
    return render(request, "signin.html", None, error=None,
                  next=request.query_params.get("next", "/"))


async def signin_post(request: Request) -> Response:
    ctx: Context = request.app.state.cronfleet
    form = await request.form()
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host')}":
        return render(request, "signin.html", None, status=403,
                      error="sign-in from another site refused", next="/")
    token = str(form.get("token", "")).strip()
    nxt = str(form.get("next", "/"))
    try:
        info = await ctx.api_store.authenticate(token) if token else None
    except StoreError as exc:
        return render(request, "signin.html", None, status=503,
                      error=f"cannot check the token: {exc}", next=nxt)
    if info is None:
        return render(request, "signin.html", None, status=401,
                      error="unknown or revoked token", next=nxt)
    resp = redirect(nxt)
    set_session(request, resp, token)
    return resp


async def signin_once(request: Request) -> Response:
    ctx: Context = request.app.state.cronfleet
    codes: OneTimeCodes | None = getattr(request.app.state, "signin_codes", None)
    code = request.path_params["code"]
    if codes is None or not codes.redeem(code):
        return render(request, "signin.html", None, status=410,
                      error="this sign-in link was used already or has expired: sign in "
                            "with a token (cronfleet tokens create)", next="/")
    plain, info = await ctx.api_store.create_token(name="dashboard", team="default",
                                                   role="admin", created_by="first start")
    await ctx.api_store.audit(team="default", actor="first start", action="token.create",
                              target=info.id, details={"name": "dashboard",
                                                       "role": "admin",
                                                       "via": "one-time sign-in link"})
    resp = redirect("/")
    set_session(request, resp, plain)
    return resp


async def signout(request: Request) -> Response:
    ctx: Context = request.app.state.cronfleet
    token = request.cookies.get(COOKIE)
    form = await request.form()
    sent = form.get("csrf")
    if token and not csrf_ok(request, token, sent if isinstance(sent, str) else None):
        return HTMLResponse("CSRF token missing or wrong", status_code=403)
    del ctx
    resp = redirect("/signin")
    set_session(request, resp, None)
    return resp


_DOCS_BAR = ('<nav aria-label="Back" class="docs-back"><a href="/">← cronfleet dashboard</a>'
             '</nav>')


async def docs(request: Request) -> Response:
    """The API's docs (Swagger UI, offline), with a way back to the dashboard."""
    page_ = get_swagger_ui_html(openapi_url="/openapi.json", title="cronfleet API",
                                swagger_js_url="/ui/static/swagger/swagger-ui-bundle.js",
                                swagger_css_url="/ui/static/swagger/swagger-ui.css",
                                swagger_favicon_url="/ui/static/swagger/favicon.png")
    html = bytes(page_.body).decode()
    html = html.replace("</head>", '<link rel="stylesheet" href="/ui/static/docs.css">\n'
                        "</head>", 1).replace("<body>", "<body>\n" + _DOCS_BAR, 1)
    return HTMLResponse(html)


def install(app: FastAPI, codes: OneTimeCodes | None = None) -> None:
    """Add the dashboard, its assets and the offline API docs to the API ``app``."""
    app.state.signin_codes = codes
    # pages and their refreshes compress well (a jobs page of 50 rows: ~10x)
    app.add_middleware(GZipMiddleware, minimum_size=2000, compresslevel=5)
    static = resources.files("cronfleet.dashboard") / "static"
    swagger = resources.files("fastapi_offline") / "static"
    app.mount("/ui/static/swagger", StaticFiles(directory=str(swagger)), name="swagger")
    app.mount("/ui/static", StaticFiles(directory=str(static)), name="dashboard-static")
    r = APIRouter(include_in_schema=False)
    r.add_api_route("/docs", docs, methods=["GET"])
    r.add_api_route("/signin", signin_form, methods=["GET"])
    r.add_api_route("/signin", signin_post, methods=["POST"])
    r.add_api_route("/signin/once/{code}", signin_once, methods=["GET"])
    r.add_api_route("/signout", signout, methods=["POST"])
    for path, fn, methods in (
        ("/", overview_page, ["GET"]),
        ("/jobs", jobs_page, ["GET"]),
        ("/jobs/{job_id:path}", job_page, ["GET"]),
        ("/runs", runs_page, ["GET"]),
        ("/runs/{run_id}", run_page, ["GET"]),
        ("/runs/{run_id}/label", run_label, ["GET"]),
        ("/runs/{run_id}/cancel", cancel_page, ["GET"]),
        ("/runs/{run_id}/cancel", cancel_post, ["POST"]),
        ("/backfills", backfill_post, ["POST"]),
        ("/backfills/{backfill_id}", backfill_page, ["GET"]),
        ("/backfills/{backfill_id}/cancel", backfill_cancel, ["POST"]),
        ("/audit", audit_page, ["GET"]),
        ("/secrets", secrets_page, ["GET"]),
        ("/secrets", secret_post, ["POST"]),
        ("/tokens", tokens_page, ["GET"]),
        ("/tokens", token_post, ["POST"]),
        ("/act", act, ["POST"]),
        ("/edit", edit_page, ["GET"]),
        ("/edit", edit_post, ["POST"]),
        ("/preview", preview, ["POST"]),
        ("/prefs", prefs_post, ["POST"]),
    ):
        r.add_api_route(path, page(fn), methods=methods)
    app.include_router(r)
