"""Suite-wide test settings."""

from __future__ import annotations

import os

from hypothesis import settings

# In CI the property tests run the same examples every time (a submission must not fail on
# a seed nobody can reproduce); on a laptop they explore new examples on every run, and a
# failure prints the seed and the failing example to reproduce it.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
