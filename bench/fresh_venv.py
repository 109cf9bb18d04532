"""Install size and start time in fresh virtualenvs: the core and each extra.

    .venv/bin/python bench/fresh_venv.py          # core and [all]
    .venv/bin/python bench/fresh_venv.py --each   # also every extra alone

For each install: a venv without pip, ``uv pip install`` of this checkout (not editable),
the size of site-packages and the number of distributions; then the start time of
``cronfleet --version`` (median and minimum of 15 runs after one warm-up), next to the
start of the bare interpreter (``python -c pass``) as the peer.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _uv() -> str:
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        return str(uv)
    found = shutil.which("uv")
    if found is None:
        sys.exit("needs uv: pip install uv")
    return found


def _size(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def _timed(cmd: list[str], n: int = 15) -> tuple[float, float]:
    subprocess.run(cmd, capture_output=True, check=True)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000, min(times) * 1000


def measure(extra: str | None, base: Path) -> None:
    venv = base / (extra or "core")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    spec = str(ROOT) if extra is None else f"{ROOT}[{extra}]"
    subprocess.run([_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin/python"),
                    spec], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    dists = len(list(site.glob("*.dist-info")))
    med, low = _timed([str(venv / "bin/cronfleet"), "--version"])
    bare, _ = _timed([str(venv / "bin/python"), "-c", "pass"])
    print(f"{'cronfleet' if extra is None else f'cronfleet[{extra}]':<20} "
          f"{_size(site):6.1f} MB  {dists:3d} distributions  "
          f"cronfleet --version: median {med:4.0f} ms (min {low:4.0f} ms; "
          f"python -c pass: {bare:3.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--each", action="store_true", help="every extra alone too")
    args = parser.parse_args()
    extras: list[str | None] = [None, "all"]
    if args.each:
        extras[1:1] = ["postgres", "http", "server", "otel"]
    with tempfile.TemporaryDirectory() as tmp:
        for extra in extras:
            measure(extra, Path(tmp))


if __name__ == "__main__":
    main()
