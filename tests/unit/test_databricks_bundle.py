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
