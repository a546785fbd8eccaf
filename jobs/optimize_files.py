"""The optimize-files job (options and exit codes: jobs/runner.py).

python -m jobs.optimize_files --data-dir ROOT [--topic T] [--dry-run] [--engine local]
"""

from __future__ import annotations

from jobs.runner import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("optimize-files", argv)


if __name__ == "__main__":
    raise SystemExit(main())
