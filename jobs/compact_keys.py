"""The compact-keys job (options and exit codes: jobs/runner.py).

python -m jobs.compact_keys --data-dir ROOT [--topic T] [--dry-run] [--engine local]
"""

from __future__ import annotations

from jobs.runner import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("compact-keys", argv)


if __name__ == "__main__":
    raise SystemExit(main())
