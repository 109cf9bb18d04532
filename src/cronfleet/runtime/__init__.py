"""The runtime: the scheduler facade and the parts that fire, run and record slots
(docs/architecture.md, "Modules" and "Data flow of one instant")."""

from cronfleet.runtime.events import RunFinished, RunRetried, RunStarting
from cronfleet.runtime.scheduler import Scheduler

__all__ = ["RunFinished", "RunRetried", "RunStarting", "Scheduler"]
