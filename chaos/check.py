"""`python -m chaos.check history.jsonl [--compacted TOPIC ...]`: print the checker's report,
exit 1 when it finds an anomaly (2 on bad arguments).

Compacted topics are also read from the history's `fault` events of kind `config` with detail
`compacted:<topic>`, which the scenarios record."""

from __future__ import annotations

import argparse
import json
import sys

from chaos.checker import check
from chaos.history import Event, Fault, load

CONFIG_FAULT = "config"
COMPACTED_PREFIX = "compacted:"


def compacted_topics(events: list[Event]) -> set[str]:
    """Topics the history declares compacted (`Recorder.fault("config", "compacted:T")`)."""
    return {
        e.op.detail.removeprefix(COMPACTED_PREFIX)
        for e in events
        if isinstance(e.op, Fault)
        and e.op.kind == CONFIG_FAULT
        and e.op.detail.startswith(COMPACTED_PREFIX)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.check", description=__doc__)
    parser.add_argument("history", help="a JSONL history")
    parser.add_argument("--compacted", nargs="*", default=[], help="compacted topics")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    events = load(args.history)
    report = check(events, compacted={*args.compacted, *compacted_topics(events)})
    if args.json:
        sys.stdout.write(json.dumps(report.summary(), indent=2) + "\n")
    else:
        sys.stdout.write(report.text() + "\n")
    return 0 if report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
