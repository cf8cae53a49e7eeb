"""Helpers for the dataset tests: a dataset root of the test's own, JSONL text, an uploaded dataset."""

from __future__ import annotations

import json

import pytest

from experiments import datasets
from experiments.dataset_models import Dataset


def jsonl(rows: int = 6, start: int = 0) -> bytes:
    """`rows` good lines: {"prompt": "i+i=", "answer": "2i"}."""
    return "".join(
        json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(start, start + rows)
    ).encode()


@pytest.fixture
def dataset_root(settings, tmp_path):
    """The dataset roots are this test's own folder (uploads land in <it>/users/<id>/)."""
    root = tmp_path / "datasets"
    root.mkdir()
    settings.PLATFORM_DATASET_DIRS = [root]
    return root


def upload(user, name: str = "arith", content: bytes | None = None, description: str = "") -> Dataset:
    """`user`'s new dataset `name` (through experiments.datasets, as the API and the page do)."""
    dataset, check = datasets.upload(
        user, name, [jsonl() if content is None else content], f"{name}.jsonl", description
    )
    assert dataset is not None, check.error_lines()
    return dataset


def dataset_config(tiny_config, train: str | None = "arith", evaluation: str | None = None, **overrides) -> dict:
    """A tiny config that trains on the dataset named `train` (and evaluates on `evaluation`)."""
    config = tiny_config(**overrides)
    config["data"].update(task=None, train_path=None, eval_path=None, train_dataset=train, eval_dataset=evaluation)
    config["rewards"] = [{"name": "exact_match", "weight": 1.0}]
    return config
