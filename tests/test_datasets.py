"""Bundled datasets load with the statistics their SOURCE notes give; generators are seeded."""

from __future__ import annotations

import numpy as np
import pytest

from privtd import ValidationError, datasets

# (answers after merging repeats, tasks, workers, truths for answered tasks, labels or None)
EXPECTED = {
    "duchenne": (17729, 2134, 64, 159, [0, 1]),
    "web": (15567, 2665, 177, 2653, [1, 2, 3, 4, 5]),
    "adult_content": (89799, 11040, 825, 333, [0, 1, 2, 3]),
    "sentiment": (20000, 1000, 85, 1000, [0, 1]),
    "dog": (8070, 807, 109, 807, [0, 1, 2, 3]),
    "emotion": (7000, 700, 38, 700, None),
    "population": (4183, 1172, 2415, 277, None),
}


def test_every_dataset_is_listed():
    assert datasets.list_datasets() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_load(name):
    data = datasets.load(name)
    n, tasks, workers, truths, labels = EXPECTED[name]
    answers = data.answers
    assert (answers.n_answers, answers.n_tasks, answers.n_workers) == (n, tasks, workers)
    assert len(data.truth) == truths
    assert data.truth.index.isin(answers.tasks).all()
    if labels is None:
        assert answers.kind == "numeric"
    else:
        assert list(answers.labels) == labels
        assert set(data.truth) <= set(labels)
    assert "Provenance" in data.source
    answers_again, truth_again = datasets.load(name)  # unpacks as a pair
    assert truth_again.equals(data.truth)


def test_repeats_are_merged_visibly():
    data = datasets.load("duchenne")
    assert data.answers.notes[0] == "kept the first of repeated answers, dropping 12590 row(s)"
    majority = datasets.load("duchenne", on_duplicate="majority")
    assert "majority" in majority.answers.notes[0]
    with pytest.raises(ValidationError, match="repeat"):
        datasets.load("duchenne", on_duplicate="error")


def test_unknown_dataset():
    with pytest.raises(ValidationError, match="Unknown dataset 'smile'. Choose one of"):
        datasets.load("smile")


def test_export(tmp_path):
    paths = datasets.export("dog", tmp_path / "dog")
    assert [p.name for p in paths] == ["answers.csv", "truth.csv", "SOURCE.md"]
    assert (tmp_path / "dog" / "answers.csv").read_text().startswith("worker,task,answer")


def test_categorical_generator_is_seeded_and_honest():
    a, truth, params = datasets.make_categorical(
        20000, 50, 3, answers_per_task=4, accuracy=(0.6, 0.9), rng=11
    )
    b, truth_b, _ = datasets.make_categorical(
        20000, 50, 3, answers_per_task=4, accuracy=(0.6, 0.9), rng=11
    )
    assert np.array_equal(a.value, b.value) and truth.equals(truth_b)
    assert a.n_answers == 80000
    pairs = a.task.astype(np.int64) * 50 + a.worker
    assert np.unique(pairs).size == pairs.size  # distinct workers per task
    correct = a.value == truth.to_numpy()[a.task]
    acc = np.bincount(a.worker, weights=correct) / a.worker_counts()
    # Each worker has ~1600 answers: 4 standard errors is about 0.05.
    se = np.sqrt(params["accuracy"] * (1 - params["accuracy"]) / a.worker_counts())
    assert np.all(np.abs(acc - params["accuracy"]) < 4 * se)


def test_confusion_generator():
    conf = np.tile(np.array([[0.9, 0.3], [0.1, 0.7]]), (10, 1, 1))
    a, truth, _ = datasets.make_categorical(50000, 10, 2, answers_per_task=2, confusion=conf, rng=5)
    y = truth.to_numpy()[a.task]
    p1_given_0 = a.value[y == 0].mean()
    n0 = int((y == 0).sum())
    assert abs(p1_given_0 - 0.1) < 4 * np.sqrt(0.09 / n0)


def test_numeric_generator():
    a, truth, params = datasets.make_numeric(300, 40, error_rate=1.0, rng=2)
    assert a.n_answers == 12000
    resid = a.value - truth.to_numpy()[a.task]
    sd = np.sqrt(np.bincount(a.worker, weights=resid**2) / a.worker_counts())
    # 300 answers per worker: the sample sd is within ~5 relative standard errors (1/sqrt(600)).
    assert np.all(np.abs(sd / params["sigma"] - 1) < 5 / np.sqrt(600))
