"""Exceptions raised by the cron engine.

Two kinds of failure exist and they are kept apart on purpose:

* :class:`CronSyntaxError` -- the text (or the time zone) can never make a schedule. It is
  raised by :func:`cronfleet.cron.parse` and only there; it is a :class:`ValueError`.
* :class:`NoFireTimeError` -- a parsed schedule has no fire time in the searched direction
  (a seconds-precise job that always falls in a DST gap, or the calendar runs out at year 1
  or 9999). It is a :class:`LookupError`, raised by ``next``/``prev``.
"""

from __future__ import annotations

__all__ = ["CronSyntaxError", "NoFireTimeError"]


class CronSyntaxError(ValueError):
    """An expression that cannot be parsed.

    The message names the field, the offending token and its 1-based column, e.g.
    ``day-of-month: '32' is out of range 1-31 (column 7)``. The same facts are available as
    attributes so callers can point at the problem themselves.

    Attributes:
        field: the field name (``"minute"``, ``"day-of-week"``, ``"expression"``,
            ``"interval"``, ``"timezone"``...).
        token: the offending text, exactly as written.
        column: 1-based column of ``token`` in ``expr`` (``None`` for the time zone).
        expr: the full expression text.
        reason: the message without the field prefix and the column suffix.
        lang: the language of ``reason`` (``"fr"`` for a French sentence: the message
            then reads ``phrase : ... (colonne N)``).
    """

    field: str
    token: str
    column: int | None
    expr: str
    reason: str

    def __init__(
        self, field: str, token: str, column: int | None, expr: str, reason: str,
        lang: str = "en",
    ) -> None:
        self.field = field
        self.token = token
        self.column = column
        self.expr = expr
        self.reason = reason
        self.lang = lang
        if lang == "fr":  # a French sentence is refused in French
            where = f" (colonne {column})" if column is not None else ""
            super().__init__(f"{_FR_FIELDS.get(field, field)} : {reason}{where}")
            return
        where = f" (column {column})" if column is not None else ""
        super().__init__(f"{field}: {reason}{where}")

    def __reduce__(self) -> tuple[type[CronSyntaxError],
                                  tuple[str, str, int | None, str, str, str]]:
        return (type(self), (self.field, self.token, self.column, self.expr, self.reason,
                             self.lang))


_FR_FIELDS = {"sentence": "phrase"}


class NoFireTimeError(LookupError):
    """A valid schedule has no fire time in the searched range."""
