"""What every dialect shares about rows: the column lists of the ledger tables, the time
codec and the registry rows' JSON. The mapping of a database row to a record and back is
the dialect's own (``sqlite/ops.py``, ``postgres/ops.py``, ``redis/store.py``).

Time codec: SQLite keeps integer milliseconds since the epoch; PostgreSQL keeps
``timestamptz`` but every batch travels as JSON with the same integer milliseconds (a slot
is then the key every instance computes alike), converted by ``to_timestamp`` in SQL. Both
read back as UTC ``datetime``. Column order is the same in both dialects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronfleet.store.base import Declared

__all__ = [
    "RUN_COLUMNS",
    "RUN_INSERT_COLUMNS",
    "dt",
    "dumps",
    "ms",
    "msd",
    "registry_rows",
]

# the run columns, in the order every mapper below reads and writes them
RUN_COLUMNS = (
    "id, job_id, slot, triggered_by, status, reason, instance_id, fencing_token, manual, "
    "is_catchup, is_recovery, attempt, claimed_at, started_at, finished_at, deadline, "
    "result, error, logs, params, forced_by"
)
RUN_INSERT_COLUMNS = RUN_COLUMNS.removeprefix("id, ")
# -- the time codec ------------------------------------------------------------------------


def ms(ts: float) -> int:
    """Epoch seconds to the integer milliseconds both dialects' batches carry."""
    return round(ts * 1000)


def msd(d: datetime | None) -> int | None:
    """A datetime to integer milliseconds (None stays None)."""
    return None if d is None else round(d.timestamp() * 1000)


def dt(value: int | None) -> datetime | None:
    """Integer milliseconds to a UTC datetime (None stays None)."""
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC)


def dumps(rows: Any) -> str:
    """A batch as one compact JSON document (``default=str``: anything else as text)."""
    return json.dumps(rows, default=str, separators=(",", ":"))


def registry_rows(rows: Iterable[Declared], *, spec_as_text: bool = False) -> str:
    """Registry rows ``[[job, team, source, digest, spec], ...]`` as one JSON document,
    ``spec`` an object (PostgreSQL's ``jsonb``) or, with ``spec_as_text``, a JSON string
    (SQLite and Redis keep it as text). Each distinct spec object is serialised once:
    100,000 jobs declared alike share one spec dict (``registry.declared``), and dumping
    it 100,000 times cost ~0.7 s of a start."""
    texts: dict[int, str] = {}
    parts = []
    for d in rows:
        text = texts.get(id(d.spec))
        if text is None:
            text = json.dumps(d.spec, sort_keys=True, separators=(",", ":"), default=str)
            if spec_as_text:
                text = json.dumps(text)
            texts[id(d.spec)] = text
        head = json.dumps([d.job_id, d.team, d.source, d.digest], separators=(",", ":"))
        parts.append(f"{head[:-1]},{text}]")
    return "[" + ",".join(parts) + "]"


