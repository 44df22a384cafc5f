"""Tiny datasets made once per session (64 px, a few short episodes: about a second each)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.data import MakeSpec, make_dataset

TINY = MakeSpec(episodes=3, views=2, size=64, seed=0, frames=60)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """Read-only: tests that break a dataset take ``broken_copy`` instead."""
    return make_dataset(tmp_path_factory.mktemp("tiny") / "ds", TINY)


@pytest.fixture
def broken_copy(tiny_dataset, tmp_path) -> Path:
    """A private copy of the tiny dataset, to corrupt."""
    return Path(shutil.copytree(tiny_dataset, tmp_path / "ds"))
