"""cronfleet: each slot of each job fires exactly once across a fleet of processes."""

__version__ = "0.1.0.dev0"
