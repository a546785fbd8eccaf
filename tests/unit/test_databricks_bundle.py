"""The Databricks Asset Bundle (databricks.yml + its includes) against the official schema.

The schema is the one `databricks bundle schema` prints, stored at
<repo>/../shared/databricks/bundle_config_schema.json. It declares no "$schema";
it uses "$defs", so it is read as draft 2020-12. Its `pattern`s use `\\p{L}` and
`\\p{N}`, which Python's `re` rejects, so the validator below evaluates
`pattern`/`patternProperties` (and the pattern half of `additionalProperties`)
with the `regex` package instead.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import regex
import yaml
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import best_match

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLE_FILE = REPO_ROOT / "databricks.yml"
PYPROJECT_FILE = REPO_ROOT / "pyproject.toml"
SCHEMA_FILE = REPO_ROOT.parent / "shared" / "databricks" / "bundle_config_schema.json"


# --- bundle loading: root file + `include` globs, merged as the Databricks CLI does ---


class Bundle:
    """The merged bundle document and, per resource, the file that defined it."""

    def __init__(self, document: dict[str, Any], origins: dict[tuple[str, str], Path]):
        self.document = document
        self.origins = origins


def _merge(into: dict[str, Any], other: dict[str, Any], where: tuple[str, ...]) -> None:
    """Deep-merge `other` into `into`: maps recurse, lists append, anything else clashes.

    A resource key (resources.<type>.<name>) defined in two files is an error, as in the CLI.
    """
    for key, value in other.items():
        path = (*where, key)
        if key not in into:
            into[key] = copy.deepcopy(value)
        elif len(where) == 2 and where[0] == "resources":
            raise ValueError(f"resource {'.'.join(path)} is defined in more than one file")
        elif isinstance(into[key], dict) and isinstance(value, dict):
            _merge(into[key], value, path)
        elif isinstance(into[key], list) and isinstance(value, list):
            into[key].extend(copy.deepcopy(value))
        else:
            raise ValueError(f"{'.'.join(path)} is set in more than one file")


def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} must hold a YAML mapping"
    return data


def load_bundle(bundle_file: Path = BUNDLE_FILE) -> Bundle:
    """Load the root bundle file and merge every file its `include` globs match."""
    root = bundle_file.parent
    document = _read_yaml(bundle_file)
    origins: dict[tuple[str, str], Path] = {}

    def note_origins(part: dict[str, Any], source: Path) -> None:
        for rtype, named in (part.get("resources") or {}).items():
            for name in named or {}:
                origins[(rtype, name)] = source

    note_origins(document, bundle_file)
    for pattern in document.get("include", []):
        matches = sorted(p for p in root.glob(pattern) if p.resolve() != bundle_file.resolve())
        if not matches:
            raise ValueError(f"include pattern {pattern!r} matches no files under {root}")
        for path in matches:
            part = _read_yaml(path)
            if "include" in part:
                raise ValueError(f"{path}: `include` is only honoured in the root bundle file")
            _merge(document, part, ())
            note_origins(part, path)
    return Bundle(document, origins)


def wheel_tasks(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Yield (job name, job, task) for every task with a python_wheel_task, nested ones too."""
    for job_name, job in (document.get("resources", {}).get("jobs") or {}).items():
        pending = list(job.get("tasks") or [])
        while pending:
            task = pending.pop()
            if "python_wheel_task" in task:
                yield job_name, job, task
            if "for_each_task" in task:
                pending.append(task["for_each_task"]["task"])


# --- the validator: draft 2020-12 with `regex`-based pattern keywords ---


@cache
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if _compiled(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties_for(base):
    """jsonschema's additionalProperties re-matches patternProperties with `re`; avoid that."""
    stock = base.VALIDATORS["additionalProperties"]

    def additional_properties(validator, additional, instance, schema):
        if "patternProperties" not in schema or not validator.is_type(instance, "object"):
            yield from stock(validator, additional, instance, schema)
            return
        known = schema.get("properties", {})
        patterns = [_compiled(p) for p in schema["patternProperties"]]
        extras = [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]
        if validator.is_type(additional, "object"):
            for key in extras:
                yield from validator.descend(instance[key], additional, path=key)
        elif additional is False and extras:
            yield ValidationError(f"{sorted(extras)!r} match no property name or pattern")

    return additional_properties


def regex_validator_class(schema: dict[str, Any]):
    """The validator class for the schema's draft, extended to use `regex` for patterns."""
    base = validators.validator_for(schema, default=Draft202012Validator)
    return validators.extend(
        base,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties_for(base),
        },
    )


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    if not SCHEMA_FILE.is_file():
        pytest.skip(
            f"official bundle schema not found at {SCHEMA_FILE} "
            "(generate it with `databricks bundle schema > bundle_config_schema.json`)"
        )
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]):
    return regex_validator_class(schema)(schema)


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return load_bundle()


def _errors(validator, document: dict[str, Any]) -> list[ValidationError]:
    return list(validator.iter_errors(document))


def _describe(errors: list[ValidationError]) -> str:
    best = best_match(errors)
    return f"{len(errors)} error(s); best match at {best.json_path}: {best.message}"


# --- tests ---


def test_schema_is_valid_2020_12_with_regex_patterns(schema):
    """The schema file is a valid draft 2020-12 schema whose patterns all compile under `regex`."""
    checker = FormatChecker()
    checker.checks("regex", raises=regex.error)(regex.compile)
    regex_validator_class(schema).check_schema(schema, format_checker=checker)


def test_includes_resolve_and_contribute_the_smoke_job(bundle):
    """Every `include` glob matches a file, and the merge brings in the lakelog_smoke job."""
    included = {path.relative_to(REPO_ROOT).as_posix() for path in bundle.origins.values()}
    assert "conf/databricks/lakelog_smoke.job.yml" in included
    assert "lakelog_smoke" in bundle.document["resources"]["jobs"]


def test_bundle_validates_against_official_schema(validator, bundle):
    """The merged bundle document has no errors under the official bundle schema."""
    errors = _errors(validator, bundle.document)
    assert not errors, _describe(errors)


def test_schema_gaps_are_checked_here(bundle):
    """Fields the schema leaves as free strings hold values the CLI accepts."""
    doc = bundle.document
    assert doc["bundle"]["name"] == "lakelog"
    modes = {name: target.get("mode") for name, target in doc["targets"].items()}
    assert set(modes.values()) <= {"development", "production"}, modes
    assert (modes["dev"], modes["prod"]) == ("development", "production")
    defaults = [name for name, target in doc["targets"].items() if target.get("default")]
    assert defaults == ["dev"]
    assert {artifact["type"] for artifact in doc["artifacts"].values()} == {"whl"}


def test_wheel_tasks_call_lakelog_console_scripts(bundle):
    """Every python_wheel_task names package `lakelog` and an entry point in [project.scripts]."""
    project = tomllib.loads(PYPROJECT_FILE.read_text(encoding="utf-8"))["project"]
    scripts = project["scripts"]
    tasks = list(wheel_tasks(bundle.document))
    assert tasks, "the bundle defines no python_wheel_task"
    for job_name, _job, task in tasks:
        wheel_task = task["python_wheel_task"]
        where = f"job {job_name}, task {task['task_key']}"
        assert wheel_task["package_name"] == project["name"] == "lakelog", where
        assert wheel_task["entry_point"] in scripts, (
            f"{where}: entry point {wheel_task['entry_point']!r} not in [project.scripts] "
            f"({sorted(scripts)})"
        )


def test_wheel_tasks_install_the_built_wheel(bundle):
    """Each wheel task installs a *.whl from the artifact's dist/ (serverless env or libraries)."""
    doc = bundle.document
    artifact_dirs = {
        (REPO_ROOT / artifact.get("path", ".")).resolve() / "dist"
        for artifact in doc["artifacts"].values()
        if artifact["type"] == "whl"
    }
    for job_name, job, task in wheel_tasks(doc):
        environments = {env["environment_key"]: env for env in job.get("environments", [])}
        wheels = [lib["whl"] for lib in task.get("libraries", []) if "whl" in lib]
        if "environment_key" in task:
            key = task["environment_key"]
            assert key in environments, f"job {job_name}: environment {key!r} is not defined"
            dependencies = environments[key].get("spec", {}).get("dependencies", [])
            wheels += [dep for dep in dependencies if dep.endswith(".whl")]
        assert wheels, f"job {job_name}, task {task['task_key']}: no wheel is installed"
        defined_in = bundle.origins[("jobs", job_name)].parent
        for wheel in wheels:
            resolved_dir = (defined_in / wheel).parent.resolve()
            assert resolved_dir in artifact_dirs, (
                f"job {job_name}: {wheel!r} (relative to {defined_in}) resolves to "
                f"{resolved_dir}, not to an artifact's dist/ ({sorted(map(str, artifact_dirs))})"
            )


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _drop(doc: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return doc


JOB = ("resources", "jobs", "lakelog_smoke")
TASK = (*JOB, "tasks", 0)


SMOKE = "$.resources.jobs.lakelog_smoke"
BROKEN_BUNDLES = {
    # id: (mutation of the valid document, json path the best-matching error must point at)
    "unknown-job-key": (lambda d: _set(d, (*JOB, "max_concurent_runs"), 1), SMOKE),
    "int-as-word": (
        lambda d: _set(d, (*JOB, "max_concurrent_runs"), "one"),
        f"{SMOKE}.max_concurrent_runs",
    ),
    "bad-var-ref": (
        lambda d: _set(d, (*JOB, "timeout_seconds"), "${var.}"),
        f"{SMOKE}.timeout_seconds",
    ),
    "wheel-task-without-entry-point": (
        lambda d: _drop(d, (*TASK, "python_wheel_task", "entry_point")),
        f"{SMOKE}.tasks[0].python_wheel_task",
    ),
    "parameters-not-a-list": (
        lambda d: _set(d, (*TASK, "python_wheel_task", "parameters"), "--version"),
        f"{SMOKE}.tasks[0].python_wheel_task.parameters",
    ),
    "bad-pause-status": (
        lambda d: _set(
            d,
            (*JOB, "schedule"),
            {"quartz_cron_expression": "0 0 3 * * ?", "timezone_id": "UTC", "pause_status": "OFF"},
        ),
        f"{SMOKE}.schedule.pause_status",
    ),
    "unknown-bundle-key": (lambda d: _set(d, ("bundle", "nmae"), "lakelog"), "$.bundle"),
    # The maintenance jobs' own keys (conf/databricks/lakelog_retention.job.yml).
    "schedule-without-timezone": (
        lambda d: _drop(d, ("resources", "jobs", "lakelog_retention", "schedule", "timezone_id")),
        "$.resources.jobs.lakelog_retention.schedule",
    ),
    "queue-misspelt": (
        lambda d: _set(d, ("resources", "jobs", "lakelog_retention", "queue"), {"enable": False}),
        "$.resources.jobs.lakelog_retention.queue",
    ),
    "retries-as-word": (
        lambda d: _set(
            d, ("resources", "jobs", "lakelog_retention", "tasks", 0, "max_retries"), "one"
        ),
        "$.resources.jobs.lakelog_retention.tasks[0].max_retries",
    ),
}


@pytest.mark.parametrize(("mutate", "where"), BROKEN_BUNDLES.values(), ids=BROKEN_BUNDLES.keys())
def test_validator_rejects_broken_bundles(validator, bundle, mutate, where):
    """One wrong key, type, enum value or `${...}` reference fails validation at that spot."""
    assert not _errors(validator, bundle.document), "the unmutated bundle must be valid"
    errors = _errors(validator, mutate(bundle.document))
    assert errors, "the validator accepted a broken bundle"
    assert best_match(errors).json_path == where, _describe(errors)


def test_validator_accepts_interpolations_only_via_regex_patterns(validator, bundle):
    """`${var.x}` in an integer field passes only because a \\p{L} pattern matches it."""
    doc = _set(bundle.document, (*JOB, "max_concurrent_runs"), "${var.max_runs}")
    assert not _errors(validator, doc)
    # Without pattern evaluation all five `${...}` string branches of the oneOf would
    # match and the value would be rejected: the pattern keyword is doing the work.
    ignore_patterns = validators.extend(
        Draft202012Validator, validators={"pattern": lambda *_: iter(())}
    )
    assert list(ignore_patterns(validator.schema).iter_errors(doc))


# --- the maintenance jobs: entry points, parameters, schedules ---
#
# None of these need the schema: they run whether or not ../shared is there.

MAINTENANCE_SCRIPTS = {
    "lakelog-retention": "jobs.retention:main",
    "lakelog-compact-keys": "jobs.compact_keys:main",
    "lakelog-optimize-files": "jobs.optimize_files:main",
    "lakelog-vacuum": "jobs.vacuum:main",
}
# Resource key -> seconds between two scheduled runs.
SCHEDULED_JOBS = {
    "lakelog_retention": 15 * 60,
    "lakelog_compact_keys": 15 * 60,
    "lakelog_optimize_files": 60 * 60,
    "lakelog_vacuum": 24 * 60 * 60,
}
# Jobs that touch no tables and run only on demand: the only ones without --data-dir.
ON_DEMAND_ONLY = {"lakelog_smoke"}
# Stands in for ${var.storage_root}, which has no default.
STORAGE_ROOT = "s3://bucket/lakelog-test"
VAR_REFERENCE = re.compile(r"\$\{var\.([A-Za-z0-9_-]+)\}")


def _scripts() -> dict[str, str]:
    return tomllib.loads(PYPROJECT_FILE.read_text(encoding="utf-8"))["project"]["scripts"]


def _maintenance_tasks(
    document: dict[str, Any],
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The wheel tasks whose entry point is a console script into the `jobs` package."""
    scripts = _scripts()
    return [
        (name, job, task)
        for name, job, task in wheel_tasks(document)
        if scripts.get(task["python_wheel_task"]["entry_point"], "").startswith("jobs.")
    ]


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _variable_problems(document: dict[str, Any]) -> list[str]:
    declared = set(document.get("variables") or {})
    used = {name for text in _strings(document) for name in VAR_REFERENCE.findall(text)}
    return [f"${{var.{name}}} is used but not declared" for name in sorted(used - declared)]


def _resolve(parameters: list[str], document: dict[str, Any]) -> list[str]:
    """The parameters with each ${var.x} replaced by its default (storage_root: a stand-in)."""
    values = {
        name: str(spec["default"])
        for name, spec in (document.get("variables") or {}).items()
        if "default" in spec
    }
    values["storage_root"] = STORAGE_ROOT
    return [VAR_REFERENCE.sub(lambda m: values[m.group(1)], p) for p in parameters]


def _storage_root_problems(task: dict[str, Any]) -> list[str]:
    """The task passes `--data-dir ${var.storage_root}` (as two adjacent parameters)."""
    parameters = task["python_wheel_task"].get("parameters") or []
    pairs = list(zip(parameters, parameters[1:], strict=False))
    if ("--data-dir", "${var.storage_root}") in pairs:
        return []
    return [f"task {task['task_key']}: no `--data-dir ${{var.storage_root}}` in {parameters}"]


# Quartz cron: sec min hour day-of-month month day-of-week [year]. Names: MON-SUN / JAN-DEC.
_MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
_DAYS = "SUN MON TUE WED THU FRI SAT".split()  # Quartz: 1 = SUN ... 7 = SAT
_CRON_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 1, 7, _DAYS),
    ("year", 1970, 2099, ()),
)
_DAY_OF_MONTH_SPECIAL = re.compile(r"L(-([1-9]|[12][0-9]|30))?|LW|([1-9]|[12][0-9]|3[01])W")
_DAY_OF_WEEK_SPECIAL = re.compile(r"([1-7]|[A-Z]{3})(L|#[1-5])")


def _cron_values(field: str, text: str) -> set[int]:
    """The values one field matches; raises ValueError when it is not valid Quartz syntax."""
    _, low, high, names = next(f for f in _CRON_FIELDS if f[0] == field)

    def number(token: str) -> int:
        if token in names:
            value = names.index(token) + 1
        elif token.isdigit():
            value = int(token)
        else:
            raise ValueError(f"{field}: {token!r} is not a number or a name")
        if not low <= value <= high:
            raise ValueError(f"{field}: {token} is outside {low}-{high}")
        return value

    values: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if base in ("*", "?"):
            start, stop = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, stop = number(first), number(last)
        else:
            start = number(base)
            stop = high if step else start
        increment = int(step) if step else 1
        if increment < 1 or start > stop:
            raise ValueError(f"{field}: {item!r} matches nothing")
        values.update(range(start, stop + 1, increment))
    return values


def _cron_problems(expression: str) -> list[str]:
    parts = expression.split()
    if len(parts) not in (6, 7):
        return [f"{expression!r}: Quartz cron has 6 or 7 fields, not {len(parts)}"]
    problems = []
    day_of_month, day_of_week = parts[3], parts[5]
    if (day_of_month == "?") == (day_of_week == "?"):
        problems.append(f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'")
    for (field, *_), text in zip(_CRON_FIELDS, parts, strict=False):
        if text == "?" and field not in ("day-of-month", "day-of-week"):
            problems.append(f"{expression!r}: '?' is only allowed in the day fields")
            continue
        if field == "day-of-month" and _DAY_OF_MONTH_SPECIAL.fullmatch(text):
            continue
        if field == "day-of-week" and _DAY_OF_WEEK_SPECIAL.fullmatch(text):
            continue
        try:
            _cron_values(field, text)
        except ValueError as error:
            problems.append(f"{expression!r}: {error}")
    return problems


def _seconds_between_runs(expression: str) -> set[int]:
    """The gaps between consecutive runs of a cron that fires every day (all days, months)."""
    second, minute, hour, day_of_month, month, day_of_week, *year = expression.split()
    if {day_of_month, day_of_week} != {"*", "?"} or month != "*" or year not in ([], ["*"]):
        raise ValueError(f"{expression!r} does not fire every day")
    times = sorted(
        h * 3600 + m * 60 + s
        for h in _cron_values("hour", hour)
        for m in _cron_values("minute", minute)
        for s in _cron_values("second", second)
    )
    return {b - a for a, b in zip(times, [*times[1:], times[0] + 86_400], strict=True)}


def _scheduled_job_problems(name: str, job: dict[str, Any], every_seconds: int) -> list[str]:
    schedule = job.get("schedule")
    if not schedule:
        return [f"{name}: no schedule"]
    expression = schedule.get("quartz_cron_expression", "")
    problems = _cron_problems(expression)
    if not problems:
        try:
            gaps = _seconds_between_runs(expression)
        except ValueError as error:
            gaps = {str(error)}
        if gaps != {every_seconds}:
            problems.append(
                f"{name}: {expression!r} runs {gaps} s apart, not every {every_seconds}"
            )
    if schedule.get("timezone_id") != "UTC":
        problems.append(f"{name}: timezone_id is {schedule.get('timezone_id')!r}, not UTC")
    if "pause_status" in schedule:
        # mode: development pauses only schedules that leave it unset; production runs those.
        problems.append(f"{name}: pause_status set, so dev deployments would not pause it")
    if job.get("max_concurrent_runs") != 1:
        problems.append(f"{name}: max_concurrent_runs is {job.get('max_concurrent_runs')}, not 1")
    if (job.get("queue") or {}).get("enabled") is not False:
        problems.append(f"{name}: queueing is on: overlapping runs would pile up, not be skipped")
    if not job.get("timeout_seconds"):
        problems.append(f"{name}: no timeout: a hung run would block every later one")
    for task in job.get("tasks") or []:
        retries = task.get("max_retries", 0)
        if retries < 0 or (retries and not task.get("min_retry_interval_millis")):
            problems.append(
                f"{name}: task {task['task_key']}: max_retries {retries} needs a bound "
                "and a min_retry_interval_millis"
            )
    return problems


def test_pyproject_declares_the_maintenance_console_scripts():
    """[project.scripts] maps each lakelog-<job> script to jobs.<module>:main."""
    scripts = _scripts()
    assert {name: scripts.get(name) for name in MAINTENANCE_SCRIPTS} == MAINTENANCE_SCRIPTS


def test_includes_contribute_one_file_per_maintenance_job(bundle):
    """Each maintenance job comes from its own conf/databricks/<key>.job.yml."""
    for name in SCHEDULED_JOBS:
        assert ("jobs", name) in bundle.origins, f"no job {name} in the bundle"
        origin = bundle.origins[("jobs", name)].relative_to(REPO_ROOT).as_posix()
        assert origin == f"conf/databricks/{name}.job.yml"


def test_every_job_but_the_smoke_job_passes_the_storage_root(bundle):
    """Each job passes `--data-dir ${var.storage_root}` to a jobs.* script, or is on demand only."""
    document = bundle.document
    maintenance = _maintenance_tasks(document)
    assert {name for name, _, _ in maintenance} == set(SCHEDULED_JOBS)
    assert set(document["resources"]["jobs"]) == set(SCHEDULED_JOBS) | ON_DEMAND_ONLY
    for _name, _job, task in maintenance:
        assert not _storage_root_problems(task)


def test_bundle_variables_are_declared(bundle):
    """Every ${var.x} the bundle uses is declared under `variables`."""
    assert not _variable_problems(bundle.document)


def test_vacuum_retention_variable_defaults_to_lakelogs_own(bundle):
    """vacuum_retention_ms defaults to 7 days, as Settings.vacuum_retention_ms, and is passed."""
    from conf.settings import Settings

    default = int(bundle.document["variables"]["vacuum_retention_ms"]["default"])
    assert default == 7 * 24 * 3_600_000 == Settings.model_fields["vacuum_retention_ms"].default
    job = bundle.document["resources"]["jobs"]["lakelog_vacuum"]
    parameters = job["tasks"][0]["python_wheel_task"]["parameters"]
    assert ("--retention-ms", "${var.vacuum_retention_ms}") in zip(
        parameters, parameters[1:], strict=False
    )


def test_scheduled_jobs_run_on_their_cadence_one_at_a_time(bundle):
    """Valid Quartz cron in UTC, left for the target to (un)pause, one run at a time."""
    jobs = bundle.document["resources"]["jobs"]
    scheduled = {name for name, job in jobs.items() if "schedule" in job}
    assert scheduled == set(SCHEDULED_JOBS)
    for name, every_seconds in SCHEDULED_JOBS.items():
        problems = _scheduled_job_problems(name, jobs[name], every_seconds)
        assert not problems, problems


RETENTION = ("resources", "jobs", "lakelog_retention")
RETENTION_CRON = (*RETENTION, "schedule", "quartz_cron_expression")
RETENTION_TASK = (*RETENTION, "tasks", 0)
RETENTION_PARAMETERS = (*RETENTION_TASK, "python_wheel_task", "parameters")
BROKEN_JOBS = {
    # id: (mutation of the valid document, part of the problem the checks must report)
    "five-field-unix-cron": (lambda d: _set(d, RETENTION_CRON, "0/15 * * * *"), "6 or 7 fields"),
    "no-question-mark": (lambda d: _set(d, RETENTION_CRON, "0 0/15 * * * *"), "must be '?'"),
    "minute-out-of-range": (
        lambda d: _set(d, RETENTION_CRON, "0 0/15,60 * * * ?"),
        "60 is outside 0-59",
    ),
    "bad-month-name": (lambda d: _set(d, RETENTION_CRON, "0 0/15 * * FOO ?"), "month"),
    "every-20-minutes": (lambda d: _set(d, RETENTION_CRON, "0 0/20 * * * ?"), "not every 900"),
    "weekdays-only": (
        lambda d: _set(d, RETENTION_CRON, "0 0/15 * ? * MON-FRI"),
        "does not fire every day",
    ),
    "not-utc": (
        lambda d: _set(d, (*RETENTION, "schedule", "timezone_id"), "Europe/Paris"),
        "not UTC",
    ),
    "explicitly-unpaused": (
        lambda d: _set(d, (*RETENTION, "schedule", "pause_status"), "UNPAUSED"),
        "pause_status set",
    ),
    "no-schedule": (lambda d: _drop(d, (*RETENTION, "schedule")), "no schedule"),
    "concurrent-runs": (
        lambda d: _set(d, (*RETENTION, "max_concurrent_runs"), 2),
        "max_concurrent_runs is 2",
    ),
    "queueing": (lambda d: _drop(d, (*RETENTION, "queue")), "queueing is on"),
    "no-timeout": (lambda d: _drop(d, (*RETENTION, "timeout_seconds")), "no timeout"),
    "retry-without-interval": (
        lambda d: _drop(d, (*RETENTION_TASK, "min_retry_interval_millis")),
        "min_retry_interval_millis",
    ),
    "retry-forever": (lambda d: _set(d, (*RETENTION_TASK, "max_retries"), -1), "max_retries -1"),
    "data-dir-literal": (
        lambda d: _set(d, RETENTION_PARAMETERS, ["--data-dir", "/tmp/x", "--engine", "spark"]),
        "no `--data-dir ${var.storage_root}`",
    ),
    "data-dir-missing": (
        lambda d: _set(d, RETENTION_PARAMETERS, ["--engine", "spark"]),
        "no `--data-dir ${var.storage_root}`",
    ),
    "undeclared-variable": (
        lambda d: _set(
            d, RETENTION_PARAMETERS, ["--data-dir", "${var.storage_root}", "--topic", "${var.nope}"]
        ),
        "${var.nope} is used but not declared",
    ),
}


@pytest.mark.parametrize(("mutate", "expected"), BROKEN_JOBS.values(), ids=BROKEN_JOBS.keys())
def test_job_checks_reject_broken_jobs(bundle, mutate, expected):
    """Each check above reports the problem it looks for, on a bundle broken that way."""
    document = mutate(bundle.document)
    job = document["resources"]["jobs"]["lakelog_retention"]
    problems = _scheduled_job_problems(
        "lakelog_retention", job, SCHEDULED_JOBS["lakelog_retention"]
    )
    problems += _storage_root_problems(job["tasks"][0])
    problems += _variable_problems(document)
    assert any(expected in problem for problem in problems), problems


# --- the built wheel, called the way a python_wheel_task calls it ---

# Runs in a fresh interpreter with the wheel first on sys.path. For each call, it looks the entry
# point up in the wheel's metadata (as a python_wheel_task does), sets sys.argv to the package
# name followed by the task's parameters, and calls it with no arguments; jobs.runner's
# run_from_args is replaced to capture the parsed options instead of running the job.
_WHEEL_PROBE = r"""
import contextlib, importlib.metadata as md, io, json, sys
request = json.load(sys.stdin)
wheel = request["wheel"]
sys.path.insert(0, wheel)
(dist,) = md.distributions(path=[wheel])
scripts = {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}
import jobs.runner
captured = []
jobs.runner.run_from_args = lambda job, args: captured.append((job, vars(args))) or 0
report = {"name": dist.metadata["Name"], "scripts": {n: ep.value for n, ep in scripts.items()}}
report["calls"] = []
for call in request["calls"]:
    result = {"entry_point": call["entry_point"], "found": call["entry_point"] in scripts}
    if result["found"]:
        target = scripts[call["entry_point"]].load()
        result["from_wheel"] = sys.modules[target.__module__].__file__.startswith(wheel + "/")
        sys.argv = [call["package_name"], *call["argv"]]
        captured.clear()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                result["returned"] = target()
            except SystemExit as exit:  # argparse's --version and --help end this way
                result["returned"] = exit.code or 0
        result["stdout"] = out.getvalue()
        result["captured"] = captured[:]
    report["calls"].append(result)
report["targets"] = {}
for value in request["targets"]:
    try:
        target = md.EntryPoint(name="probe", value=value, group="console_scripts").load()
        module_file = sys.modules[target.__module__].__file__
        report["targets"][value] = None if module_file.startswith(wheel + "/") else module_file
    except Exception as error:
        report["targets"][value] = f"{type(error).__name__}: {error}"
json.dump(report, sys.stdout)
"""
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "data", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    "spark-warehouse", "metastore_db", "results",
)  # fmt: skip


@pytest.fixture(scope="module")
def built_wheel(bundle, tmp_path_factory) -> Path:
    """The wheel the bundle's `lakelog` artifact builds, from a clean copy of the project.

    Runs the artifact's own `build` command (`python -m pip wheel --no-deps -w dist .`) with the
    output directory swapped for a temporary one; a copy keeps the repository's build/ (and any
    stale files in it) out of the wheel. About 5 s.
    """
    artifact = bundle.document["artifacts"]["lakelog"]
    command = shlex.split(artifact["build"])
    assert command[:2] == ["python", "-m"] and "-w" in command, command
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO_ROOT / artifact.get("path", "."), source, ignore=_COPY_IGNORE)
    command[0] = sys.executable
    command[command.index("-w") + 1] = str(work / "dist")
    build = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=240)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (work / "dist").glob("lakelog-*.whl")
    return wheel


def _probe(wheel: Path, calls: list[dict[str, Any]], targets: list[str]) -> dict[str, Any]:
    request = json.dumps({"wheel": str(wheel), "calls": calls, "targets": targets})
    run = subprocess.run(
        [sys.executable, "-c", _WHEEL_PROBE],
        input=request,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=wheel.parent,  # not the repository: its modules must not shadow the wheel's
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def wheel_report(bundle, built_wheel) -> dict[str, Any]:
    calls = [
        {
            "job": name,
            "package_name": task["python_wheel_task"]["package_name"],
            "entry_point": task["python_wheel_task"]["entry_point"],
            "argv": _resolve(task["python_wheel_task"].get("parameters") or [], bundle.document),
        }
        for name, _job, task in wheel_tasks(bundle.document)
    ]
    calls.append(
        {"job": None, "package_name": "lakelog", "entry_point": "lakelog-nope", "argv": []}
    )
    targets = [*_scripts().values(), "jobs.retention:nope", "jobs.nope:main"]
    report = _probe(built_wheel, calls, targets)
    report["jobs"] = [call["job"] for call in calls]
    return report


def test_wheel_declares_the_same_console_scripts_as_pyproject(wheel_report):
    """The built wheel's entry_points.txt holds every [project.scripts] entry, unchanged."""
    assert wheel_report["name"] == "lakelog"
    assert wheel_report["scripts"] == _scripts()


def test_wheel_console_script_targets_import_from_the_wheel(wheel_report):
    """Each script's module:function loads from the wheel (with the venv's dependencies).

    A target that fails to import, or imports from outside the wheel, is reported with the
    reason; the two deliberately wrong targets show that the check can fail.
    """
    problems = {value: error for value, error in wheel_report["targets"].items() if error}
    assert set(problems) == {"jobs.retention:nope", "jobs.nope:main"}, problems


def test_wheel_tasks_run_their_entry_point_from_the_wheel(wheel_report):
    """Every python_wheel_task's entry point is in the wheel and resolves to the wheel's code."""
    *tasks, bogus = zip(wheel_report["jobs"], wheel_report["calls"], strict=True)
    assert bogus[1]["found"] is False, "the probe found an entry point the wheel does not have"
    assert tasks
    for job, call in tasks:
        assert call["found"], f"job {job}: {call['entry_point']} is not in the wheel's metadata"
        assert call["from_wheel"], f"job {job}: {call['entry_point']} ran code not in the wheel"
        assert call["returned"] == 0, (job, call)


def test_maintenance_tasks_parse_their_parameters_as_databricks_passes_them(wheel_report):
    """sys.argv = [package, *parameters] and main() with no arguments: the right job and options."""
    scripts = _scripts()
    seen = set()
    for job, call in zip(wheel_report["jobs"], wheel_report["calls"], strict=True):
        if not scripts.get(call["entry_point"], "").startswith("jobs."):
            continue
        seen.add(job)
        assert call["returned"] == 0
        ((name, options),) = call["captured"]
        assert name == call["entry_point"].removeprefix("lakelog-"), (job, name)
        assert options["data_dir"] == STORAGE_ROOT, (job, options)
        assert options["topic"] == [] and options["dry_run"] is False, (job, options)
        if name == "vacuum":
            assert options["retention_ms"] == 7 * 24 * 3_600_000, options
    assert seen == set(SCHEDULED_JOBS)
