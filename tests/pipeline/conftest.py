"""Fixtures for the pipeline tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pipeline_data import write_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    return write_dataset(tmp_path_factory.mktemp("telemetry") / "input")
