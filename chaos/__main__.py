"""`python -m chaos run T1|T2|T2b|T3|T3g|T4|TK|TX|TX2|SQ --seed S --ops N [--duration-s D]
[--workdir DIR] [--store local|s3|azure]`.

Runs one scenario against real gateway processes, prints its figures (operations by type and
outcome, faults injected, anomalies, recovery p50/p99) and exits 1 when the checker or the
scenario's own invariants found anything. T2b is a control run (fencing disabled): it exits 0
only when the checker did find anomalies, 1 when it found none (the scenario is too weak).
`--store` puts the storage root of T2 and T2b in a bucket of a moto S3 server or a container of
Azurite (both started here, as the tests start them), so the leader pauses run against an
object store's conditional PUTs. `python -m chaos check H.jsonl` = `chaos.check`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
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
    run.add_argument(
        "--store",
        choices=STORES,
        default="local",
        help="the storage root: a directory, a moto S3 bucket or an Azurite container",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.store != "local" and args.scenario not in OBJECT_STORE_SCENARIOS:
        parser.error(f"--store {args.store} runs {', '.join(OBJECT_STORE_SCENARIOS)} only")
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with _store_root(args.store, args.workdir) as store_options:
        result = SCENARIOS[args.scenario](
            seed=args.seed,
            ops=args.ops,
            duration_s=args.duration_s,
            workdir=args.workdir,
            **store_options,
        )
    sys.stdout.write(result.text() + "\n")
    if args.json:
        sys.stdout.write(json.dumps(result.report.summary(), indent=2) + "\n")
    return 0 if result.passed else 1


STORES = ("local", "s3", "azure")
OBJECT_STORE_SCENARIOS = ("T2", "T2b")


@contextlib.contextmanager
def _store_root(store: str, workdir: Path | None) -> Iterator[dict]:
    """The scenario options for `store`: none for a local directory; else a root in a new
    bucket (container) of a server started here, its variables set in this process too (the
    checker reads the root) and passed to the gateways."""
    if store == "local":
        yield {}
        return
    server_dir = Path(tempfile.mkdtemp(prefix=f"chaos-{store}-", dir=workdir))
    if store == "s3":
        from tests.s3_server import start_s3_server

        server = start_s3_server(server_dir)
        root = f"s3://{server.create_bucket()}/lakelog"
    else:
        from tests.azurite_server import start_azurite

        server = start_azurite(server_dir)
        root = f"az://{server.create_container()}/lakelog"
    os.environ.update(server.env)
    try:
        yield {"root": root, "store_env": tuple(server.env.items())}
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
