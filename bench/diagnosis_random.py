"""Score the diagnosis on random cases (gpuwait.diagnosis.randomcases) drawn from fresh seeds:
top-1 kind and component, a per-kind table and the confusion table, printed as markdown.

    python bench/diagnosis_random.py [--cases 240] [--seed-base 24000000] [--jobs 2]

The seeds looked at while the rules were written (``DEV_SEEDS``) are never drawn; pass a different
``--seed-base`` to score on cases nobody has seen.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from gpuwait.diagnosis.randomcases import DEV_SEEDS, FRESH_BASE, MATTERS, draw_case, fresh_seeds, score_case


def _table(outcomes) -> list[str]:
    judged = [o for o in outcomes if o.expect_kind is not None]
    quiet = [o for o in outcomes if o.expect_kind is None]
    kind = sum(o.kind_ok for o in judged) / max(len(judged), 1)
    comp = sum(o.component_ok for o in judged) / max(len(judged), 1)
    lines = [f"- cases: {len(outcomes)} ({len(judged)} with a cause costing >= {100 * MATTERS:g} % of the step, "
             f"{len(quiet)} healthy or costing less)",
             f"- top finding's kind right: **{100 * kind:.1f} %**; component right: **{100 * comp:.1f} %**",
             f"- healthy / negligible cases with nothing above info: **{sum(o.kind_ok for o in quiet)} of {len(quiet)}**",
             "", "| cause | cases | kind right | component right |", "|---|---|---|---|"]
    for k in sorted({o.expect_kind for o in judged}):
        rows = [o for o in judged if o.expect_kind == k]
        lines.append(f"| {k} | {len(rows)} | {sum(o.kind_ok for o in rows)} | {sum(o.component_ok for o in rows)} |")
    labels = sorted({str(o.expect_kind) for o in outcomes})
    predicted = sorted({str(o.top_kind) for o in outcomes} | set(labels))
    table = Counter((str(o.expect_kind), str(o.top_kind)) for o in outcomes)
    lines += ["", "Confusion (rows: the cause, `None` = nothing above info expected; columns: the top finding)", "",
              "| | " + " | ".join(predicted) + " |", "|---|" + "---|" * len(predicted)]
    for row in labels:
        lines.append(f"| **{row}** | " + " | ".join(str(table.get((row, col), "")) for col in predicted) + " |")
    return lines


def _score_seed(seed: int):
    return score_case(draw_case(seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=240)
    parser.add_argument("--seed-base", type=int, default=None,
                        help=f"the first seed (default {FRESH_BASE:,}; with --dev, the first development seed)")
    parser.add_argument("--dev", action="store_true",
                        help="use the development seeds from --seed-base on instead (never reported)")
    parser.add_argument("--misses", action="store_true", help="list every miss")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (cases are independent)")
    args = parser.parse_args()
    if args.dev:
        seeds = [s for s in sorted(DEV_SEEDS) if s >= (args.seed_base or 0)][: args.cases]
    else:
        seeds = fresh_seeds(args.cases, FRESH_BASE if args.seed_base is None else args.seed_base)
    start = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(_score_seed, seeds, chunksize=4))
    else:
        outcomes = [_score_seed(seed) for seed in seeds]
    wall = time.perf_counter() - start
    print(f"## Random cases ({'development' if args.dev else 'fresh'} seeds {seeds[0]}..{seeds[-1]}, {wall:.0f} s)\n")
    print("\n".join(_table(outcomes)))
    if args.misses:
        print("\nMisses:\n")
        for o in outcomes:
            if not o.component_ok:
                c = o.case
                print(f"- seed {c.seed} {c.fabric}/{c.workload}{' telemetry' if c.telemetry else ''} `{c.inject}` "
                      f"cost {100 * o.cost:.1f} % (fabric {100 * o.intrinsic:.1f} %): expected {o.expect_kind}, "
                      f"top {o.top_kind} on {o.top_component} ({o.top_severity})")


if __name__ == "__main__":
    main()
