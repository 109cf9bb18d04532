"""Process logging for ``cronfleet run`` and the integrations: the text format (today's
lines, unchanged) or JSON, one object per line, with stable field names a log pipeline
can index.

Every record has ``ts`` (RFC 3339, UTC), ``level``, ``logger``, ``message``; a record
about a run also has ``job``, ``slot``, ``run_id``, ``instance``, ``fencing_token``,
``outcome`` and ``duration`` (seconds) -- taken from the ``cronfleet`` mapping the
runtime passes as ``extra`` (:data:`RUN_FIELDS`); an exception adds ``exc``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["FORMATS", "RUN_FIELDS", "TEXT_FORMAT", "JsonFormatter", "configure"]

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
TEXT_DATEFMT = "%Y-%m-%d %H:%M:%S"
#: the run fields of a JSON line, in this order (absent when the record is not about a run)
RUN_FIELDS = ("job", "slot", "run_id", "instance", "fencing_token", "outcome", "duration",
              "attempt")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (no newline inside)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "cronfleet", None)
        if isinstance(fields, dict):
            for key in RUN_FIELDS:
                if key in fields:
                    out[key] = fields[key]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt`` at ``level``, replacing the
    root logger's handlers (what ``logging.basicConfig(force=True)`` does)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT, TEXT_DATEFMT))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
