"""Spark tests share one local Spark session with Delta (local[2]) for the whole run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf.settings import Settings
from pipeline.spark import build_spark_session

SPARK_TESTS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # A `pytestmark` in a conftest does not reach the test modules: mark them here so every
    # test in this directory can be selected or skipped with `-m spark`.
    for item in items:
        if SPARK_TESTS_DIR in item.path.parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    """One Spark session for all Spark tests; starting one costs seconds."""
    session = build_spark_session(Settings(spark_master="local[2]", spark_shuffle_partitions=2))
    yield session
    session.stop()
