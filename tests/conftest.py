"""Small crowds shared by several test files, built once per test process (session scope):
tests read them and never change them in place."""

from __future__ import annotations

import pandas as pd
import pytest

from privtd import Answers, datasets


@pytest.fixture(scope="session")
def dog_answers() -> Answers:
    """The bundled Dog dataset's answers: 807 tasks, 4 labels."""
    return datasets.load("dog").answers


@pytest.fixture(scope="session")
def dog_truth() -> pd.Series:
    """The Dog dataset's truths, task -> label."""
    return datasets.load("dog").truth


@pytest.fixture(scope="session")
def three_labels() -> Answers:
    """20 tasks x 6 workers over three labels, 3 answers a task: what a binary-only estimator
    refuses (privtd.utils.estimator_checks.check_binary_only fits the same crowd)."""
    answers, _, _ = datasets.make_categorical(20, 6, 3, answers_per_task=3, rng=1)
    return answers
