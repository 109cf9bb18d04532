"""Sentence -> schedule: average time of one ``from_text`` over the phrase corpus.

    .venv/bin/python bench/words.py                 # 5 rounds over the corpus, best kept
    PYTHONPATH=/path/to/peer .venv/bin/python bench/words.py

Measures ``cronfleet.cron.words.compile_text`` (the grammar alone: sentence -> canonical
text) and ``from_text`` (the grammar plus ``parse()`` of the canonical expression, which
``parse`` caches, as in a scheduler; the description is computed only when read). Target:
100 µs per sentence on average.

Peers: no Python package on PyPI turns French sentences into cron offline. Two English-only
packages do English sentences: ``cronspeak`` (``parse_human``) and ``human-readable-cron``
(``convert_to_cron``); they are not dependencies of cronfleet. When importable, each is run
on the English phrases of the corpus: how many it accepts, how many of those fire as the
corpus says (compared as cronfleet schedules, in UTC), and the time per sentence on the
phrases it accepts, next to cronfleet's on the same phrases.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cronfleet.cron import CronSyntaxError, from_text, parse
from cronfleet.cron.words import compile_text

PHRASES = Path(__file__).resolve().parents[1] / "tests" / "conformance" / "phrases"
ROUNDS = 5


def _load() -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    en = [(e["text"], e["expr"]) for e in json.loads((PHRASES / "en.json").read_text("utf-8"))]
    fr = [(e["text"], e["expr"]) for e in json.loads((PHRASES / "fr.json").read_text("utf-8"))]
    refused = [e["text"] for e in json.loads((PHRASES / "refusals.json").read_text("utf-8"))]
    return en, fr, refused


def _per_call(fn: Callable[[str], object], texts: list[str]) -> float:
    """Best round's average seconds per call (exceptions count: refusals are work too)."""
    best = float("inf")
    for _ in range(ROUNDS):
        gc.collect()
        t0 = time.perf_counter()
        for t in texts:
            with contextlib.suppress(Exception):
                fn(t)
        best = min(best, (time.perf_counter() - t0) / len(texts))
    return best


def _peer(name: str, module: str, attr: str, en: list[tuple[str, str]]) -> None:
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError:
        print(f"{name:22} not installed (pip install {name}; not a cronfleet dependency)")
        return
    accepted: list[str] = []
    agree = 0
    for text, expr in en:
        try:
            out = fn(text)
        except Exception:
            continue
        if not isinstance(out, str) or not out:
            continue
        accepted.append(text)
        with contextlib.suppress(CronSyntaxError):
            agree += parse(out) == parse(expr)
    if not accepted:
        print(f"{name:22} accepts none of the {len(en)} English phrases")
        return
    peer_us = _per_call(fn, accepted) * 1e6
    ours_us = _per_call(from_text, accepted) * 1e6
    print(f"{name:22} accepts {len(accepted):3}/{len(en)} English phrases, {agree:3} of them "
          f"fire as the corpus says; {peer_us:7.1f} µs/sentence vs cronfleet {ours_us:6.1f} "
          "on the same phrases")


def main() -> None:
    en, fr, refused = _load()
    texts = [t for t, _ in en + fr]
    print(f"python {sys.version.split()[0]}; corpus: {len(en)} English, {len(fr)} French "
          f"phrases that compile, {len(refused)} refusals; best of {ROUNDS} rounds\n")
    for label, group in (("English", [t for t, _ in en]), ("French", [t for t, _ in fr]),
                         ("all compiled", texts), ("refusals", refused)):
        g = _per_call(compile_text, group) * 1e6
        f = _per_call(from_text, group) * 1e6
        print(f"{label:14} compile_text {g:6.1f} µs   from_text {f:6.1f} µs per sentence")
    cold = time.perf_counter()
    for t in texts:
        from_text(t).description  # noqa: B018 - the description, first time per expression
    cold = (time.perf_counter() - cold) / len(texts) * 1e6
    print(f"{'':14} from_text + description, first read: {cold:.0f} µs per sentence "
          "(cron-descriptor)")
    print("\npeers (English only; none reads French):")
    _peer("cronspeak", "cronspeak", "parse_human", en)
    _peer("human-readable-cron", "human_readable_cron", "convert_to_cron", en)


if __name__ == "__main__":
    main()
