"""Rewrite ``op_db_known_failures.txt``: run every op_db case through ``thunder.jit`` and record the
ones that fail, with their failure class. Prints pass / fail / error counts per kind and class.

    python packages/thunder-core/tests/op_db_refresh.py            # all cases, 2 processes
    python packages/thunder-core/tests/op_db_refresh.py -j 1 -k softmax --dry-run
    python packages/thunder-core/tests/op_db_refresh.py --summary  # the figures of the committed file, no run

Both runs end with the op-level figures, ``N of M ops give values, K of L give float64 grads, V value
mismatches``: M counts the distinct op_db ops (``name`` or ``name.variant``) with a value case whose samples
eager accepts on CPU (float32, or the op's fallback dtype), N those whose every such value case (function,
method, in-place) passes; L and K the same for the float64 grad cases (ops supporting autograd in float64,
random ones left out); V counts the cases thunder ran but whose result differed from eager's (the silent-wrong
kind).

Run it after fixing ops (``test_op_db.py`` reports fixed ones as strict XPASS failures) and commit
the rewritten file. ``THUNDER_OP_DB_SAMPLES`` must match what CI uses (default 2).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import op_db_support as support  # noqa: E402

_OPS: dict = {}


def _init() -> None:
    import thunder  # noqa: F401  (import once per worker)

    for case, op in support.cases(support.load_op_db()):
        _OPS[case] = op


def _alarm(signum, frame):
    raise TimeoutError("case took too long")


def _run(case: support.Case) -> tuple[support.Case, str, str, float]:
    """(case, "pass" | "fail" | "empty", class, seconds)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    start = time.perf_counter()
    try:
        checked = support.check_case(case, _OPS[case])
        status, cls = ("pass", "") if checked else ("empty", "")
    except Exception as exc:  # noqa: BLE001  (every failure is recorded with its class)
        status, cls = "fail", support.failure_class(exc)
    finally:
        signal.alarm(0)
    return case, status, cls, time.perf_counter() - start


def op_figures(statuses: dict[str, tuple[str, str]]) -> str:
    """The op-level figures from ``{case key: (status, class)}`` (status ``pass``, ``fail`` or ``empty``)."""
    per_op: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    mismatches = 0
    for key, (status, cls) in statuses.items():
        op, _, kind = key.split()
        if status != "empty":
            per_op[op, kind].append(status)
        mismatches += status == "fail" and cls.startswith("mismatch-")
    figures = {}
    for kind in ("value", "grad"):
        ops = [s for (_, k), s in per_op.items() if k == kind]
        figures[kind] = (sum(all(x == "pass" for x in s) for s in ops), len(ops))
    (n, m), (k, g) = figures["value"], figures["grad"]
    return f"{n} of {m} ops give values, {k} of {g} give float64 grads, {mismatches} value mismatches"


def summary_of_known_failures() -> str:
    """``op_figures`` for the committed known-failure file: every case not listed in it passes."""
    known = support.read_known_failures()
    statuses = {}
    for case, _ in support.cases(support.load_op_db()):
        cls = known.get(case.key)
        statuses[case.key] = (
            ("pass", "") if cls is None else ("empty", "") if cls == support.NO_SAMPLE else ("fail", cls)
        )
    return op_figures(statuses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("-k", default="", help="only cases whose 'op variant kind' contains this")
    parser.add_argument("--dry-run", action="store_true", help="print, do not rewrite the file")
    parser.add_argument("--slowest", type=int, default=10, help="print the N slowest cases")
    parser.add_argument("--summary", action="store_true", help="print the figures of the committed file; run nothing")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary_of_known_failures())
        return 0

    all_cases = [case for case, _ in support.cases(support.load_op_db())]
    selected = [c for c in all_cases if args.k in c.key]
    start = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=_init) as pool:
            results = pool.map(_run, selected, chunksize=4)
    else:
        _init()
        results = [_run(c) for c in selected]
    wall = time.perf_counter() - start

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case, status, cls, _ in results:
        counts[case.kind][status if status != "fail" else f"fail {cls}"] += 1
    for kind, counter in sorted(counts.items()):
        print(f"{kind}: " + ", ".join(f"{k}={v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1])))
    print(f"{len(results)} cases in {wall:.0f} s wall, {sum(r[3] for r in results):.0f} s summed")
    for case, _, _, secs in sorted(results, key=lambda r: -r[3])[: args.slowest]:
        print(f"  {secs:6.2f} s  {case.key}")

    print(op_figures({c.key: (status, cls) for c, status, cls, _ in results}))

    failures = sorted((c.key, cls) for c, status, cls, _ in results if status == "fail")
    failures += sorted((c.key, support.NO_SAMPLE) for c, status, _, _ in results if status == "empty")
    if args.dry_run:
        for key, cls in failures:
            print(f"{key} {cls}")
        return 0
    known = support.read_known_failures()
    selected_keys = {c.key for c in selected}
    kept = {k: v for k, v in known.items() if k not in selected_keys}  # cases outside -k keep theirs
    kept.update(dict(failures))
    lines = [
        "# op_db cases that fail through thunder.jit: `op variant kind failure-class`, one per line.",
        "# test_op_db.py marks them strict xfail; it leaves out the cases of class "
        f"{support.NO_SAMPLE} (eager PyTorch accepts none of their samples, nothing to compare).",
        "# Regenerate: python packages/thunder-core/tests/op_db_refresh.py",
        *(f"{k} {v}" for k, v in sorted(kept.items())),
    ]
    support.KNOWN_FAILURES_FILE.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(kept)} known failures to {support.KNOWN_FAILURES_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
