"""Buckets: how the fleet divides the jobs created over the API without any process
reading them all.

Every API job falls in one of :data:`BUCKETS` buckets by a hash of its id
(:func:`bucket_of`). The store keeps each definition's bucket beside it (an index on
``(bucket, id)``), so a process reads the definitions of the buckets it owns in keyset
pages and nothing else; the buckets themselves are divided among the live processes by
rendezvous hashing (:mod:`cronfleet.runtime.ownership`). 1,024 buckets keep the shares
even (each of 4 processes gets 25 % ± 3 %) while one bucket stays small to move
(a thousandth of the jobs).

The hash is the first 32 bits of the MD5 of the id's UTF-8 bytes, low 10 bits: MD5
because PostgreSQL computes the same in SQL (``md5(id)``), which fills the column of
definitions stored before it existed (migration 15). It spreads ids; it protects nothing.
"""

from __future__ import annotations

import hashlib

__all__ = ["ALL_BUCKETS", "BUCKETS", "bucket_of"]

BUCKETS = 1024
ALL_BUCKETS = frozenset(range(BUCKETS))


def bucket_of(job_id: str) -> int:
    """The bucket of an API job's id (``0 .. BUCKETS - 1``)."""
    return int.from_bytes(hashlib.md5(job_id.encode(), usedforsecurity=False).digest()[:4],
                          "big") & (BUCKETS - 1)
