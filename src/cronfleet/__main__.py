"""``python -m cronfleet``: the ``cronfleet`` command."""

from cronfleet.cli import main

main()
