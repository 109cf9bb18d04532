"""``python -m cronfleet.cli``."""

from cronfleet.cli import main

main()
