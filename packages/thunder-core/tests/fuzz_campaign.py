"""A long differential fuzz run: draw programs, tally thunder-vs-eager mismatches by class, and
shrink one minimal repro per class.

    python packages/thunder-core/tests/fuzz_campaign.py -n 2000                 # every feature
    python packages/thunder-core/tests/fuzz_campaign.py -n 300 --features elementwise,view,inplace_view
    python packages/thunder-core/tests/fuzz_campaign.py -n 300 --per-feature    # each feature beside a base

Every program is checked for values, dtypes, requires_grad, inputs updated in place and gradients
(``differential.check``). The repro printed for each class is a standalone script.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import hypothesis  # noqa: E402
from differential.check import CHECKS, Divergence, DocumentedRefusal, check_program  # noqa: E402
from differential.programs import FEATURES, programs  # noqa: E402
from hypothesis import HealthCheck, Phase, find, given, settings  # noqa: E402
from hypothesis.errors import NoSuchExample  # noqa: E402

_BASE = {"elementwise", "broadcast"}
# features that only change how other features draw, and the features they act on
_NEEDS = {
    "singular_values": {"reduction"},
    "zero_dim_views": {"view", "reduction"},
    "aliased_inputs": {"inplace_input"},
}
_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def _divergence(program, skip) -> Divergence | None:
    try:
        check_program(program, skip=skip, output_aliasing=True)
    except Divergence as d:
        return d
    return None


def _minimize(program, cls: str, skip) -> object:
    """Drop lines, outputs and inputs one at a time while the program still shows mismatch ``cls``."""

    def same(candidate) -> bool:
        try:
            return getattr(_divergence(candidate, skip), "cls", None) == cls
        except Exception:  # e.g. a dropped line defined a name a later one reads
            return False

    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(program.lines))):
            candidate = dataclasses.replace(program, lines=program.lines[:i] + program.lines[i + 1 :])
            if same(candidate):
                program, changed = candidate, True
        for i in reversed(range(len(program.outputs))):
            if len(program.outputs) > 1:
                candidate = dataclasses.replace(program, outputs=program.outputs[:i] + program.outputs[i + 1 :])
                if same(candidate):
                    program, changed = candidate, True
    return program


def campaign(features: set[str], n: int, max_lines: int, seed: int | None, shrink: bool, skip: set[str]) -> dict:
    tally: collections.Counter = collections.Counter()
    refused: collections.Counter = collections.Counter()
    first: dict = {}
    ran = [0]

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=_QUIET, phases=[Phase.generate])
    @given(programs(frozenset(features), max_lines=max_lines))
    def run(program):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if not check_program(program, skip=skip, output_aliasing=True):
                    return
            except Divergence as d:
                tally[d.cls] += 1
                first.setdefault(d.cls, d)
            except DocumentedRefusal as r:  # (a clear error docs/sharp_edges.md documents: no mismatch)
                refused[r.cls] += 1
            ran[0] += 1

    if seed is not None:
        run = hypothesis.seed(seed)(run)
    start = time.perf_counter()
    run()
    secs = time.perf_counter() - start
    print(
        f"features={sorted(features)} skip={sorted(skip)}: {ran[0]} programs in {secs:.0f} s, {sum(tally.values())} mismatches"
    )
    for cls, count in tally.most_common():
        print(f"  {count:5d}  {cls}")
    if refused:
        print(f"{sum(refused.values())} documented refusals (docs/sharp_edges.md), not mismatches")
        for cls, count in refused.most_common():
            print(f"  {count:5d}  {cls}")
    if shrink:
        for cls, d in first.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    smallest = find(
                        programs(d.program.features, max_lines=max_lines),
                        lambda p, cls=cls: getattr(_divergence(p, skip), "cls", None) == cls,
                        settings=settings(max_examples=300, database=None, suppress_health_check=_QUIET, deadline=None),
                    )
            except NoSuchExample:
                smallest = d.program
            smallest = _minimize(smallest, cls, skip)
            d = _divergence(smallest, skip) or d
            print(f"\n===== {cls} =====\n{d.detail.splitlines()[0][:300]}{smallest!r}")
    return dict(tally)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=500, help="programs per run")
    parser.add_argument("--features", default=",".join(FEATURES), help=f"comma-separated among {sorted(FEATURES)}")
    parser.add_argument(
        "--per-feature",
        action="store_true",
        help="one run per feature, beside elementwise+broadcast (and what it acts on)",
    )
    parser.add_argument("--max-lines", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--skip", default="", help=f"comma-separated checks to leave out, among {CHECKS}")
    parser.add_argument("--no-shrink", action="store_true", help="skip shrinking one repro per class")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if args.per_feature:
        for feature in FEATURES:
            campaign(
                _BASE | {feature} | _NEEDS.get(feature, set()),
                args.n,
                args.max_lines,
                args.seed,
                shrink=not args.no_shrink,
                skip=skip,
            )
    else:
        campaign(set(args.features.split(",")), args.n, args.max_lines, args.seed, shrink=not args.no_shrink, skip=skip)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
