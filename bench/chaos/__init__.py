"""The published fault suite (``make chaos``): real cronfleet processes against real stores,
faults injected, every slot accounted for. See docs/reliability.md.

    .venv/bin/python -m bench.chaos                       # every scenario, both stores
    .venv/bin/python -m bench.chaos --store postgres --only kill9,cut5 --json

``faults`` holds the tools (TCP proxy, private PostgreSQL cluster, SQLite lock and
corruption), ``worker`` the scheduler process, ``harness`` the fleet, the accounting and
the scenarios. The tests import the same tools (tests/chaos, tests/store/pg.py).
"""
