"""`python -m chaos run T1|T2|T2b|T3|T3g|T4|TK --seed S --ops N [--duration-s D] [--workdir DIR]`.

Runs one scenario against real gateway processes, prints its figures (operations by type and
outcome, faults injected, anomalies, recovery p50/p99) and exits 1 when the checker or the
scenario's own invariants found anything. T2b is a control run (fencing disabled): it exits 0
only when the checker did find anomalies, 1 when it found none (the scenario is too weak).
`python -m chaos check H.jsonl` = `chaos.check`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from chaos import check as check_command
from chaos.scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check"]:
        return check_command.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario")
    run.add_argument("scenario", choices=sorted(SCENARIOS))
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--ops", type=int, default=2000, help="sends (records produced)")
    run.add_argument("--duration-s", type=float, default=600.0, help="stop producing after")
    run.add_argument("--workdir", type=Path, default=None, help="where histories and data go")
    run.add_argument("--json", action="store_true", help="also print the summary as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    result = SCENARIOS[args.scenario](
        seed=args.seed, ops=args.ops, duration_s=args.duration_s, workdir=args.workdir
    )
    sys.stdout.write(result.text() + "\n")
    if args.json:
        sys.stdout.write(json.dumps(result.report.summary(), indent=2) + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
