"""Replicate the error rates of chosen null scenarios of the calibration with fresh draws.

The calibration makes about 80 error-rate checks, each against alpha + 2 Monte Carlo SE; even
when every true rate is exactly alpha, each check fails by chance with probability about 2.3%,
so a full run may show one such failure. This script re-measures the scenarios whose names
contain a pattern, with an independent seed and more simulations, so a failing check can be told
apart from a real excess. It reports; it does not replace the calibration's figures.

    python benchmarks/calibration_replicate.py "increase e=10%, truth 1.10 (at threshold), EAGLE" \\
        --max-launches 20 --sims 4000 --seed 777
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import calibration as calib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pattern", help="a substring of the scenario names to replicate")
    ap.add_argument("--max-launches", type=int, required=True, help="the sequential design's cap")
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, required=True, help="a seed other than the calibration's")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    chosen = [sc for sc in calib.scenarios() if args.pattern in sc.name and sc.truth in ("A/A", "at margin")]
    if not chosen:
        print(f"error: no null scenario name contains {args.pattern!r}", file=sys.stderr)
        return 2
    looks = calib._looks(args.max_launches)
    print(f"replication: sequential blocks of {calib.BLOCK} up to {args.max_launches} ({looks} looks), "
          f"{args.sims} simulations per scenario, seed {args.seed}")
    bound_se = math.sqrt(calib.ALPHA * (1 - calib.ALPHA) / args.sims)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for sc in chosen:
            jobs = [(sc, i, args.seed, args.max_launches, ()) for i in range(args.sims)]
            verdicts = [r["seq"][0] for r in pool.map(calib.run_one, jobs, chunksize=max(1, args.sims // 16))]
            for err in sc.errors:
                p, se = calib._rate([v == err for v in verdicts])
                mark = "ok" if p <= calib.ALPHA + 2 * bound_se else "EXCESS"
                print(f"  {sc.name:58s} P({err}) = {calib._fmt(p, se)}  "
                      f"(bound {calib.ALPHA} + 2*{bound_se:.4f}: {mark})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
