"""The one store URL parser: every place that reads a store URL (the run stores, the side
tables, the config file, the CLI) asks :func:`parse_store_url`.

* ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``sqlite:///:memory:`` -- no query
  options.
* ``postgresql://…`` / ``postgres://…`` -- any libpq URI; the query keys cronfleet reads
  (``schema``, ``pool_min``, ``pool_max``, ``time_source``) are taken out, the rest is
  left to libpq. A libpq ``key=value`` string is accepted by :func:`split_pg_url` too.
* ``redis://[user:password@]host:6379/0?prefix=cf:`` / ``rediss://…`` (TLS) -- ``prefix``
  (default ``cronfleet:``) starts every key; the rest goes to redis-py as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from cronfleet.errors import StoreError

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_SCHEMA",
    "PG_OPTIONS",
    "StoreURL",
    "parse_store_url",
    "redact_url",
    "resolve_sqlite_url",
    "split_pg_url",
]

Dialect = Literal["sqlite", "postgres", "redis"]
SQLITE_PREFIX = "sqlite:///"
DEFAULT_SCHEMA = "cronfleet"
# our options in a PostgreSQL URL's query; everything else is passed to libpq untouched
PG_OPTIONS = ("schema", "pool_min", "pool_max", "time_source", "call_timeout")
DEFAULT_PREFIX = "cronfleet:"
REDIS_OPTIONS = ("prefix",)


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL. ``path``: the SQLite file (``:memory:`` included);
    ``conninfo`` and ``options``: the libpq URI without our keys, and our keys."""

    url: str
    dialect: Dialect
    path: str = ""
    conninfo: str = ""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def schema(self) -> str:
        """The PostgreSQL schema (``?schema=``, default ``cronfleet``)."""
        return self.options.get("schema") or DEFAULT_SCHEMA

    @property
    def prefix(self) -> str:
        """The Redis key prefix (``?prefix=``, default ``cronfleet:``)."""
        return self.options.get("prefix", DEFAULT_PREFIX)

    @property
    def in_memory(self) -> bool:
        return self.dialect == "sqlite" and self.path == ":memory:"

    @property
    def no_file_yet(self) -> bool:
        """A SQLite store whose file does not exist (or ``:memory:``): nothing to read."""
        return self.dialect == "sqlite" and (self.in_memory or not Path(self.path).exists())


def _dialect(url: str) -> Dialect | None:
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        return "postgres"
    if scheme in ("redis", "rediss"):
        return "redis"
    return None


def split_pg_url(url: str) -> tuple[str, dict[str, str]]:
    """``(libpq conninfo, our options)`` of a PostgreSQL URL (or libpq key=value string)."""
    if "://" not in url:
        return url, {}  # a libpq "key=value" string
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in PG_OPTIONS}
    rest = [(k, v) for k, v in query if k not in PG_OPTIONS]
    # not urlunsplit: with no host (``postgresql:///db``, the local socket) it drops the
    # "//" and libpq then reads "postgresql:/db" as a broken key=value string
    conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}"
    if rest:
        conninfo += "?" + urlencode(rest)
    if parts.fragment:
        conninfo += "#" + parts.fragment
    return conninfo, ours


def parse_store_url(url: str) -> StoreURL:
    """Parse a store URL; raises :class:`StoreError` naming what is wrong."""
    dialect = _dialect(url)
    if dialect == "sqlite":
        if not url.startswith(SQLITE_PREFIX):
            raise StoreError(
                f"invalid SQLite URL {url!r}: expected sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db"
            )
        path, _, query = url[len(SQLITE_PREFIX) :].partition("?")
        if not path:
            raise StoreError(f"invalid SQLite URL {url!r}: no file path after 'sqlite:///'")
        if query:
            raise StoreError(f"invalid SQLite URL {url!r}: query options are not supported")
        return StoreURL(url, "sqlite", path=path)
    if dialect == "postgres":
        if not url.lower().startswith(("postgresql://", "postgres://")):
            raise StoreError(
                f"invalid PostgreSQL URL {url!r}: expected postgresql://user@host:5432/dbname"
            )
        conninfo, options = split_pg_url(url)
        return StoreURL(url, "postgres", conninfo=conninfo, options=options)
    if dialect == "redis":
        parts = urlsplit(url)
        if not parts.hostname and not parts.path.strip("/"):
            raise StoreError(
                f"invalid Redis URL {redact_url(url)!r}: expected redis://host:6379/0"
            )
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in pairs if k in REDIS_OPTIONS}
        if "prefix" in ours and not ours["prefix"]:
            raise StoreError(
                f"invalid Redis URL {redact_url(url)!r}: prefix is empty (omit it for "
                f"the default {DEFAULT_PREFIX!r})"
            )
        kept = [(k, v) for k, v in pairs if k not in REDIS_OPTIONS]
        conninfo = urlunsplit(parts._replace(query=urlencode(kept)))
        return StoreURL(url, "redis", conninfo=conninfo, options=ours)
    raise StoreError(
        f"unknown store URL {url!r}: expected sqlite:///path.db, postgresql://user@host/db "
        "or redis://host:6379/0"
    )


def resolve_sqlite_url(url: str, base: Path) -> str:
    """``sqlite:///relative.db`` made relative to ``base`` (a config file's folder); any
    other URL (absolute, ``:memory:``, PostgreSQL) as is."""
    if _dialect(url) != "sqlite" or not url.startswith(SQLITE_PREFIX):
        return url
    rest = url[len(SQLITE_PREFIX) :]
    if rest.startswith("/") or rest.startswith(":memory:"):
        return url
    return SQLITE_PREFIX + str((base / rest).resolve())


def redact_url(url: str) -> str:
    """The URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
