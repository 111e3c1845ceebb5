"""MACE on a skewed binary crowd with Zipf worker activity, held to crowd-kit 1.4.2's MACE.

crowd-kit's figures at its defaults on this crowd are higher in accuracy and lower in balanced
accuracy than privtd's, and they are not the model's: crowd-kit indexes its parameters by first
appearance and its strategy counts by sorted worker id, so unless the ids appear in sorted order
each worker is fitted with another's strategy (docs/inference.md, MACE). Fed worker codes in
first-appearance order, crowd-kit fits the model; those are the figures stored, and privtd's
MACE at its defaults must reach them. Made by benchmarks/bench_mace_skewed.py; the comparisons
that run crowd-kit itself are skipped where it is not installed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowds import skewed_crowd
from privtd import Answers, evaluate
from privtd.inference import MACE
from test_reference_glad_mace import crowdkit_start

# MACE's likelihood creeps: on this crowd some restarts use all 100 iterations.
pytestmark = pytest.mark.filterwarnings("ignore::privtd.errors.ConvergenceWarning")
REFERENCE = Path(__file__).parent / "reference" / "crowdkit_glad_mace" / "skewed_crowd_mace.json"
ACTIVITY = 1.6


@pytest.fixture(scope="module")
def reference():
    stored = json.loads(REFERENCE.read_text())
    assert stored["activity"] == ACTIVITY
    return stored["seeds"]


@pytest.fixture(scope="module", params=[0, 1])
def crowd(request):
    """The crowd of a seed and privtd's MACE at its defaults on it."""
    answers, truth = skewed_crowd(request.param, activity=ACTIVITY)
    fitted = MACE().fit(answers).truths_.reindex(truth.index).astype(int)
    return request.param, answers, truth, fitted


def tolerances(
    truth: pd.Series, accuracy: float, recalls: tuple[float, float]
) -> tuple[float, float]:
    """Three binomial standard errors over the 8,315 tasks: of the accuracy, and of the balanced
    accuracy (half the root sum of the two recalls' variances, each over its class's tasks)."""
    n = len(truth)
    n_one = int(truth.sum())
    acc = 3 * math.sqrt(accuracy * (1 - accuracy) / n)
    r0, r1 = recalls
    bal = 3 * 0.5 * math.sqrt(r0 * (1 - r0) / (n - n_one) + r1 * (1 - r1) / n_one)
    return acc, bal


def scores(labels: pd.Series, truth: pd.Series) -> dict[str, float]:
    labels = labels.reindex(truth.index).astype(int)
    m = evaluate(labels, truth)
    t = truth.to_numpy()
    y = labels.to_numpy()
    return {
        "accuracy": float(m["accuracy"]),
        "balanced_accuracy": float(m["balanced_accuracy"]),
        "recall_0": float((y[t == 0] == 0).mean()),
        "recall_1": float((y[t == 1] == 1).mean()),
        "ones": int((y == 1).sum()),
    }


def test_mace_reaches_crowdkits_fit_of_the_model(crowd, reference):
    seed, _, truth, fitted = crowd
    ref = reference[str(seed)]
    assert ref["truth_ones"] == int(truth.sum()), "the crowd changed: rerun the benchmark"
    ours = scores(fitted, truth)
    theirs = ref["crowdkit_coded"]
    acc_tol, bal_tol = tolerances(truth, ours["accuracy"], (ours["recall_0"], ours["recall_1"]))
    # Measured (seeds 0 / 1): accuracy 0.9217 / 0.9064 against 0.9189 / 0.9040, balanced
    # 0.9253 / 0.8801 against 0.9241 / 0.8810 (tolerances 0.009 / 0.010 and 0.013 / 0.018).
    # A MACE that fits each worker with another's strategy, as crowd-kit does on these ids,
    # gives 0.952 / 0.926 and fails here.
    assert abs(ours["accuracy"] - theirs["accuracy"]) <= acc_tol
    assert abs(ours["balanced_accuracy"] - theirs["balanced_accuracy"]) <= bal_tol
    labels = np.array([int(c) for c in ref["crowdkit_coded_labels"]])
    # Two fits of the same model from different starts: they part on a few tasks near 0.5.
    assert (fitted.to_numpy() == labels).mean() >= 0.99
    # Where crowd-kit mixes up the strategies it labels fewer tasks 1 (more accurate on this
    # skew, less balanced): what privtd is not held to.
    raw = ref["crowdkit"]
    assert raw["balanced_accuracy"] < theirs["balanced_accuracy"] - bal_tol


def test_mace_from_crowdkits_start_gives_its_labels(crowd, reference):
    """The same model: from crowd-kit's start (mapped onto privtd's codes), its 50 VB
    iterations give crowd-kit's labels (measured: on every task of both seeds)."""
    seed, answers, truth, _ = crowd
    est = MACE(max_iter=50, tol=0.0)
    est._starts = [crowdkit_start(answers)]
    fitted = est.fit(answers).truths_.reindex(truth.index).astype(int).to_numpy()
    labels = np.array([int(c) for c in reference[str(seed)]["crowdkit_coded_labels"]])
    assert (fitted == labels).mean() >= 0.999


def test_mace_does_not_depend_on_worker_names(crowd):
    _, answers, truth, fitted = crowd
    frame = answers.to_frame()
    names = pd.Index(answers.workers)[np.random.default_rng(7).permutation(answers.n_workers)]
    renamed = Answers.from_frame(
        frame.assign(worker=frame["worker"].map(dict(zip(answers.workers, names, strict=True))))
    )
    first = scores(fitted, truth)
    second = scores(MACE().fit(renamed).truths_, truth)
    acc_tol, bal_tol = tolerances(truth, first["accuracy"], (first["recall_0"], first["recall_1"]))
    assert abs(first["accuracy"] - second["accuracy"]) <= acc_tol
    assert abs(first["balanced_accuracy"] - second["balanced_accuracy"]) <= bal_tol


def coded(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    worker, _ = pd.factorize(frame["worker"])
    label, label_of = pd.factorize(frame["label"])
    return frame.assign(worker=worker, label=label), np.asarray(label_of)


def test_stored_figures_are_crowdkits(reference):
    """Reruns crowd-kit on seed 0: its fit from first-appearance codes gives the stored labels,
    and its fit as given moves when the same workers are renamed."""
    crowdkit = pytest.importorskip("crowdkit")
    if crowdkit.__version__ != "1.4.2":
        pytest.skip(f"the stored figures are crowd-kit 1.4.2's, not {crowdkit.__version__}'s")
    from crowdkit.aggregation import MACE as CkMACE

    answers, truth = skewed_crowd(0, activity=ACTIVITY)
    frame = answers.to_frame().rename(columns={"answer": "label"})
    coded_frame, label_of = coded(frame)
    fit = CkMACE(n_restarts=1).fit_predict(coded_frame)
    labels = pd.Series(label_of[fit.to_numpy()], index=fit.index).reindex(truth.index)
    stored = "".join(map(str, labels.to_numpy().astype(int)))
    assert stored == reference["0"]["crowdkit_coded_labels"]
    raw = scores(CkMACE(n_restarts=1).fit_predict(frame), truth)
    assert raw["accuracy"] == pytest.approx(reference["0"]["crowdkit"]["accuracy"], abs=1e-4)
    # Renamed workers, the same answers: crowd-kit's labels change, privtd's model does not.
    order = pd.unique(frame["worker"])
    sorted_names = {w: f"w{i:03d}" for i, w in enumerate(order)}
    in_order = scores(
        CkMACE(n_restarts=1).fit_predict(frame.assign(worker=frame["worker"].map(sorted_names))),
        truth,
    )
    assert in_order["accuracy"] == pytest.approx(
        reference["0"]["crowdkit_coded"]["accuracy"], abs=1e-4
    )
