"""Record every fitted output of privtd's estimators, executors and privacy figures, and compare
two records: the check that a refactor of the EM code changed no output.

    PRIVTD_BACKEND=numpy python benchmarks/engine_identity.py record OUT.npz
    PRIVTD_BACKEND=numpy python benchmarks/engine_identity.py compare BEFORE.npz AFTER.npz
    PRIVTD_BACKEND=numpy python benchmarks/engine_identity.py compare BEFORE.npz  # records now

``PRIVTD_BACKEND`` (numpy or numba) must be set: without it each fit picks its backend by its
size and by what ran before it in the process, and the two backends agree to 1e-9, not bit for
bit. It is written into the record, and ``compare`` refuses records of different backends.

Cases (``--list`` prints them; ``--only SUBSTRING`` runs a subset):

- ``fit/METHOD/DATA``: every method of ``privtd.inference.METHODS`` with default parameters on
  every bundled dataset of a kind it takes (``privtd.datasets.load``) and on three synthetic
  crowds; a method that refuses a dataset (the binary-only ones on more labels) is recorded
  with its error's class. ``adult_content`` is cut to its first 2,000 tasks (17,063 answers):
  on all of it MinimaxEntropy alone takes over a minute on 2 cores. ``BinaryRelevance`` (over
  ``mv`` and ``ds``) on a multi-label crowd made from Dog.
- ``gold/METHOD/DATA``: one fit per method with gold (every other truth of Duchenne, every
  tenth of Emotion).
- ``aware/METHOD/MECHANISM@EPS/DATA``: the perturbation-aware estimators on answers perturbed by
  each mechanism they model (``mech.perturb(answers, rng=SEED)``, fixed seeds), at two epsilons;
  ``input/...`` records a digest of each perturbed input, so that a changed input is told
  apart from a changed fit.
- ``dask/METHOD/DATA/pN``: ``fit_distributed`` for every name of ``DISTRIBUTED_METHODS`` on
  Sentiment and Emotion, 1 and 3 partitions, on a local cluster of 2 worker processes.
- ``secure/...``: ``SecureEM`` (pairwise masking, in process; no noise to switch off) for each
  of its models, and the Paillier backend (512-bit test keys) once.
- ``privacy/...``: each mechanism's stated epsilon and delta, per answer and per release, for
  a few settings; ``Budget.charge`` sequences; ``worker_totals``; the worker's ``Ceiling``
  checks; what ``privtd perturb --report`` and ``privtd epsilon --json`` report (numbers
  only, and the numbers in what they print).

What is recorded of a fit: every public attribute ending in ``_`` (truths, probabilities,
every column of the weights, objective, iterations, convergence, confusions, priors, ...):
arrays as they are, Series and DataFrames as their index, columns and one array per column,
labels as strings, nested estimators (AwareSelect's chosen model) one level down, and the
classes of the warnings raised. Timing columns are left out.

``compare``: labels, strings and integers identical; floats equal within 1e-9 relative (1e-12
absolute near 0), NaN equal to NaN; a key recorded before and missing after is a mismatch (one
new after is listed, not failed). Prints each case's largest difference and a summary; exits 1
on any mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RTOL = 1e-9
ATOL = 1e-12
FORMAT = 1
# Columns that measure the run, not its result.
TIMING = re.compile(r"(second|time|elapsed|wall|duration|_s$|bytes)", re.IGNORECASE)

RANDOM_FIELDS = {"id", "nonce", "key", "token", "private_key"}
Arrays = dict[str, np.ndarray]


# ---------------------------------------------------------------------- flattening
def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str, np.generic)) or v is None


def _scalar(v: Any) -> np.ndarray:
    if v is None:
        return np.array("<None>")
    if isinstance(v, (str, np.str_)):
        return np.array(str(v))
    if isinstance(v, (bool, np.bool_)):
        return np.array(bool(v))
    if isinstance(v, (int, np.integer)):
        return np.array(int(v), dtype=np.int64)
    if isinstance(v, (float, np.floating)):
        return np.array(float(v), dtype=np.float64)
    return np.array(repr(v))


def _column(values: Any) -> np.ndarray:
    """An array of numbers kept as numbers; anything else (labels, ids) as strings."""
    arr = np.asarray(values)
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64) if arr.dtype.kind == "f" else arr
    if arr.dtype.kind == "c":
        return arr
    # A set's order depends on the string hash seed: write it sorted.
    return np.array(
        [
            str(sorted(map(str, x))) if isinstance(x, (set, frozenset)) else str(x)
            for x in arr.ravel()
        ],
        dtype=str,
    ).reshape(arr.shape)


def _rectangular(value: list[Any] | tuple[Any, ...]) -> np.ndarray | None:
    """A list of equal-length lists of numbers (a warm state's posteriors) as one array."""
    try:
        arr = np.array(value)
    except ValueError:  # ragged
        return None
    return arr if arr.dtype.kind in "biuf" else None


def _labels(prefix: str, column: np.ndarray, out: Arrays) -> None:
    """A long column of few distinct strings (a truth per task) as codes into their sorted
    list: the same comparison, a fraction of the size."""
    if column.dtype.kind == "U" and column.size > 50:
        uniques, codes = np.unique(column, return_inverse=True)
        if uniques.size <= column.size // 2:
            out[prefix + ".label_list"] = uniques
            out[prefix + ".label_codes"] = codes.astype(np.int32).reshape(column.shape)
            return
    out[prefix] = column


def flatten(prefix: str, value: Any, out: Arrays, depth: int = 0) -> None:
    """Put ``value`` into ``out`` as arrays under keys starting with ``prefix``."""
    from privtd.inference import Estimator

    if _is_scalar(value):
        out[prefix] = _scalar(value)
    elif isinstance(value, pd.DataFrame):
        out[prefix + ".index"] = _column(value.index)
        out[prefix + ".columns"] = _column(value.columns)
        for col in value.columns:
            if TIMING.search(str(col)):
                continue
            _labels(f"{prefix}[{col}]", _column(value[col].to_numpy()), out)
    elif isinstance(value, pd.Series):
        out[prefix + ".index"] = _column(value.index)
        _labels(prefix, _column(value.to_numpy()), out)
    elif isinstance(value, pd.Index):
        out[prefix] = _column(value)
    elif isinstance(value, np.ndarray):
        out[prefix] = _column(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not TIMING.search(str(k)):
                flatten(f"{prefix}.{k}", v, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        if all(_is_scalar(v) and v is not None for v in value):
            out[prefix] = _column(np.array(value)) if value else np.array([], dtype=float)
        elif (table := _rectangular(value)) is not None:
            out[prefix] = table
        elif depth < 3:
            for i, v in enumerate(value):
                flatten(f"{prefix}[{i}]", v, out, depth + 1)
    elif isinstance(value, Estimator) and depth <= 1:
        fitted(value, prefix + ".", out, depth + 1)
    else:
        # A mechanism, a secure-sum party, a model spec: its type, its public numbers and
        # arrays, and (a party's) model's; never keys, nonces or histories.
        out[prefix + ".type"] = np.array(type(value).__name__)
        for k, v in sorted(getattr(value, "__dict__", {}).items()):
            # A campaign's id is drawn afresh for each run: not an output of the fit.
            if k.startswith("_") or k in RANDOM_FIELDS or TIMING.search(k):
                continue
            if isinstance(v, bytes):
                continue
            if _is_scalar(v) or (isinstance(v, np.ndarray) and v.dtype.kind in "biuf"):
                flatten(f"{prefix}.{k}", v, out, depth + 1)
            elif k == "model" and depth < 3:
                flatten(f"{prefix}.{k}", v, out, depth + 1)


def fitted(est: Any, prefix: str, out: Arrays, depth: int = 0) -> None:
    """Every public fitted attribute (name ending in ``_``) of an estimator."""
    for name in sorted(dir(est)):
        if not name.endswith("_") or name.startswith("_"):
            continue
        try:
            value = getattr(est, name)
        except Exception:  # NotFittedError and the like: not set by this fit
            continue
        if callable(value) and not isinstance(value, (pd.Series, pd.DataFrame)):
            continue
        if TIMING.search(name.rstrip("_")):
            continue
        if name == "warm_state_":
            value = _warm_summary(est, value)
        flatten(prefix + name, value, out, depth)


def _warm_summary(est: Any, state: dict[str, Any]) -> dict[str, Any]:
    """The warm state holds the posteriors (or truths) recorded as ``probas_`` (``truths_``)
    again: keep how far it is from them, not a second copy (it would double the record)."""
    state = dict(state)
    tasks, values = pd.Index(state.pop("tasks")), np.asarray(state.pop("values"), dtype=float)
    if values.ndim == 2:
        ref = est.probas_.reindex(tasks).to_numpy(float)
    else:
        ref = est.truths_.reindex(tasks).to_numpy(float)
    state["n_tasks"] = len(tasks)
    state["values_shape"] = list(values.shape)
    state["values_minus_fitted"] = float(np.nanmax(np.abs(values - ref), initial=0.0))
    return state


def digest(*arrays: Any) -> np.ndarray:
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "O":
            a = a.astype(str)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return np.array(h.hexdigest())


def answers_digest(answers: Any) -> Arrays:
    return {
        "digest": digest(
            answers.task,
            answers.worker,
            answers.value,
            np.asarray(answers.tasks.astype(str)),
            np.asarray(answers.workers.astype(str)),
            np.asarray([] if answers.labels is None else answers.labels.astype(str)),
        ),
        "n_answers": np.array(answers.n_answers),
    }


@contextlib.contextmanager
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


def fit_case(make: Callable[[], Any], fit: Callable[[Any], Any]) -> Arrays:
    """Fit, and keep its fitted attributes, the warnings' classes, or the error's class."""
    from privtd.errors import PrivtdError

    out: Arrays = {}
    with caught() as seen:
        try:
            est = make()
            result = fit(est)
        except (PrivtdError, ValueError, TypeError) as exc:
            out["error"] = np.array(type(exc).__name__)
            return out
    fitted(result if result is not None else est, "", out)
    out["warnings"] = np.array(sorted({w.category.__name__ for w in seen}), dtype=str)
    return out


# ---------------------------------------------------------------------- data
class Data:
    """The inputs, built once each."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def get(self, name: str) -> tuple[Any, pd.Series | None]:
        if name not in self._cache:
            self._cache[name] = self._build(name)
        return self._cache[name]

    def _build(self, name: str) -> tuple[Any, pd.Series | None]:
        from privtd import datasets

        if name == "adult_content":
            answers, truth = datasets.load(name)
            cut = answers.subset(answers.task < 2000)
            return cut, truth[truth.index.isin(cut.tasks)]
        if name in datasets.DATASETS:
            answers, truth = datasets.load(name)
            return answers, truth
        if name == "skewed2":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from crowds import skewed_crowd

            return skewed_crowd(0)
        if name == "sparse4":
            answers, truth, _ = datasets.make_categorical(
                3000, 200, 4, answers_per_task=3, accuracy=(0.3, 0.9), rng=11
            )
            return answers, truth
        if name == "numeric":
            answers, truth, _ = datasets.make_numeric(500, 80, answers_per_task=10, rng=12)
            return answers, truth
        if name == "p3":
            from privtd.experiments import bigdata18

            answers, mu = bigdata18.synthetic(100, 300, 0.8, np.random.default_rng(7))
            return answers, pd.Series(mu, index=answers.tasks)
        if name == "multilabel":
            return multilabel(), None
        raise KeyError(name)


def multilabel() -> Any:
    """Dog's answers with a second label added to some answers: a multi-label crowd (each
    answer a set of labels) for BinaryRelevance."""
    from privtd import datasets

    frame = datasets.load("dog").answers.to_frame()
    gen = np.random.default_rng(5)
    labels = sorted(frame["answer"].unique())
    extra = gen.choice(labels, size=len(frame))
    both = gen.random(len(frame)) < 0.3
    frame["answer"] = [
        [a] if not b or e == a else sorted([a, e])
        for a, e, b in zip(frame["answer"], extra, both, strict=True)
    ]
    return frame


CATEGORICAL = ["adult_content", "dog", "duchenne", "sentiment", "web", "skewed2", "sparse4"]
NUMERIC = ["emotion", "population", "numeric"]


# ---------------------------------------------------------------------- cases
Case = tuple[str, Callable[[], Arrays]]


def fit_cases(data: Data) -> Iterator[Case]:
    from privtd.inference import METHODS, make_estimator

    for method, cls in METHODS.items():
        for name in CATEGORICAL + NUMERIC:
            kind = "categorical" if name in CATEGORICAL else "numeric"
            if kind not in cls.kinds:
                continue

            def run(method: str = method, name: str = name) -> Arrays:
                answers, _ = data.get(name)
                return fit_case(lambda: make_estimator(method), lambda e: e.fit(answers))

            yield f"fit/{method}/{name}", run
        gold_data = "duchenne" if "categorical" in cls.kinds else "emotion"

        def run_gold(method: str = method, name: str = gold_data) -> Arrays:
            answers, truth = data.get(name)
            assert truth is not None
            gold = truth.iloc[::2] if name == "duchenne" else truth.iloc[::10]
            return fit_case(lambda: make_estimator(method), lambda e: e.fit(answers, gold=gold))

        yield f"gold/{method}/{gold_data}", run_gold
    for inner in ("mv", "ds"):

        def run_br(inner: str = inner) -> Arrays:
            from privtd.inference import BinaryRelevance

            frame, _ = data.get("multilabel")
            return fit_case(lambda: BinaryRelevance(inner), lambda e: e.fit(frame))

        yield f"fit/binary-relevance({inner})/multilabel", run_br


CATEGORICAL_AWARE = [
    "aware-one-coin",
    "aware-ds",
    "aware-select",
    "aware-glad",
    "aware-mace",
    "aware-zencrowd",
]


def aware_inputs() -> list[tuple[str, str, float, dict[str, Any], list[str]]]:
    """(data, mechanism, epsilon, mechanism parameters, methods) of the aware cases."""
    out = []
    for eps in (1.0, 3.0):
        for mech in ("one-layer", "two-layer", "binary-rr"):
            out.append(("sentiment", mech, eps, {"n_labels": 2}, CATEGORICAL_AWARE))
        for mech in ("one-layer", "two-layer"):
            out.append(("dog", mech, eps, {"n_labels": 4}, CATEGORICAL_AWARE))
        out.append(("emotion", "exp-gaussian", eps, {"low": -100, "high": 100}, ["aware-gaussian"]))
        for mech in ("krr-null", "two-layer-null"):
            out.append(("p3", mech, eps, {"low": 0, "high": 9}, ["aware-null"]))
    return out


def aware_cases(data: Data) -> Iterator[Case]:
    from privtd.inference import make_estimator
    from privtd.mechanisms import make_mechanism

    perturbed: dict[str, tuple[Any, Any]] = {}

    def get(name: str, mech_name: str, eps: float, params: dict[str, Any]) -> tuple[Any, Any]:
        key = f"{mech_name}@{eps:g}/{name}"
        if key not in perturbed:
            answers, _ = data.get(name)
            mech = make_mechanism(mech_name, eps, **params)
            seed = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
            perturbed[key] = (mech, mech.perturb(answers, rng=seed))
        return perturbed[key]

    for name, mech_name, eps, params, methods in aware_inputs():
        key = f"{mech_name}@{eps:g}/{name}"

        def run_input(a: tuple[Any, ...] = (name, mech_name, eps, params)) -> Arrays:
            mech, released = get(*a)
            out = answers_digest(released)
            flatten("mechanism", {k: v for k, v in mech.params().items()}, out)
            return out

        yield f"input/{key}", run_input
        for method in methods:

            def run(
                method: str = method, a: tuple[Any, ...] = (name, mech_name, eps, params)
            ) -> Arrays:
                mech, released = get(*a)
                return fit_case(
                    lambda: make_estimator(method, mechanism=mech), lambda e: e.fit(released)
                )

            yield f"aware/{method}/{key}", run
    # The release-only estimator with gold.

    def run_null_gold() -> Arrays:
        mech, released = get("p3", "krr-null", 1.0, {"low": 0, "high": 9})
        _, truth = data.get("p3")
        assert truth is not None
        return fit_case(
            lambda: make_estimator("aware-null", mechanism=mech),
            lambda e: e.fit(released, gold=truth.iloc[::10]),
        )

    yield "gold/aware-null/krr-null@1/p3", run_null_gold


def dask_cases(data: Data, stack: contextlib.ExitStack) -> Iterator[Case]:
    from privtd.inference import DISTRIBUTED_METHODS, METHODS, make_estimator
    from privtd.inference.distributed import connect, ingest

    state: dict[str, Any] = {}

    def client() -> Any:
        if "client" not in state:
            state["dir"] = stack.enter_context(tempfile.TemporaryDirectory())
            state["client"] = stack.enter_context(connect(workers=2))
        return state["client"]

    def source(name: str, partitions: int) -> Any:
        key = f"{name}/{partitions}"
        if key not in state:
            cl = client()
            answers, _ = data.get(name)
            path = Path(state["dir"]) / f"{name}.parquet"
            if not path.exists():
                frame = answers.to_frame()
                frame["task"] = frame["task"].astype(str)
                frame["worker"] = frame["worker"].astype(str)
                frame.to_parquet(path, index=False)
            state[key] = ingest(str(path), cl, partitions=partitions)
        return state[key]

    for name in ("sentiment", "emotion"):
        kind = "categorical" if name == "sentiment" else "numeric"
        for method in DISTRIBUTED_METHODS:
            if kind not in METHODS[method].kinds:
                continue
            for partitions in (1, 3):

                def run(method: str = method, name: str = name, p: int = partitions) -> Arrays:
                    from privtd.inference import fit_distributed

                    src = source(name, p)
                    return fit_case(
                        lambda: make_estimator(method), lambda e: fit_distributed(e, src)
                    )

                yield f"dask/{method}/{name}/p{partitions}", run


def secure_cases(data: Data) -> Iterator[Case]:
    def first(name: str, n: int) -> Any:
        answers, _ = data.get(name)
        return answers.subset(answers.task < n)

    def run(model: str, name: str, n: int, **kw: Any) -> Callable[[], Arrays]:
        def go() -> Arrays:
            from privtd.secure import SecureEM

            answers = first(name, n)
            return fit_case(lambda: SecureEM(model=model, **kw), lambda e: e.fit(answers))

        return go

    yield "secure/binary/duchenne[:300]", run("binary", "duchenne", 300)
    yield "secure/multiclass/dog[:100]", run("multiclass", "dog", 100)
    # Capped: its 186 rounds to convergence take half a minute.
    yield (
        "secure/real/emotion[:100]",
        run("real", "emotion", 100, value_range=(-100.0, 100.0), gamma=1e4, max_iter=60),
    )
    yield (
        "secure/binary-paillier/duchenne[:40]",
        run(
            "binary",
            "duchenne",
            40,
            backend="paillier",
            max_iter=3,
            key_bits=512,
            test_only_short_keys=True,
        ),
    )


def _mechanisms() -> list[tuple[str, Any]]:
    """Settings of each mechanism for the privacy figures."""
    from privtd.mechanisms import (
        BinaryRR,
        ExpGaussian,
        KRRNull,
        LaplaceNull,
        MFPerturbation,
        OneLayerRR,
        TwoLayerNull,
        TwoLayerRR,
        task_profiles,
    )

    out: list[tuple[str, Any]] = []
    for eps in (0.5, 1.0, 3.0):
        for k in (2, 5):
            out.append((f"one-layer@{eps:g},K={k}", OneLayerRR.from_epsilon(eps, n_labels=k)))
            out.append((f"two-layer@{eps:g},K={k}", TwoLayerRR.from_epsilon(eps, n_labels=k)))
        out.append((f"binary-rr@{eps:g}", BinaryRR.from_epsilon(eps)))
        out.append((f"exp-gaussian@{eps:g}", ExpGaussian.from_epsilon(eps, low=0.0, high=10.0)))
        out.append((f"krr-null@{eps:g}", KRRNull.from_epsilon(eps, 0, 9)))
        out.append((f"laplace@{eps:g}", LaplaceNull.from_epsilon(eps, 0, 9)))
        out.append((f"two-layer-null@{eps:g}", TwoLayerNull.from_epsilon(eps, 0, 9)))
        out.append(
            (f"mf@{eps:g}", MFPerturbation.from_epsilon(eps, task_profiles(40, 5, rng=0), 0, 9))
        )
    out.append(("one-layer(f=0.3,K=4)", OneLayerRR(0.3, n_labels=4)))
    out.append(("two-layer(a=0.1,b=0.3,K=3)", TwoLayerRR(0.1, 0.3, n_labels=3)))
    out.append(("two-layer@2,K=4,a=0.05", TwoLayerRR.from_epsilon(2.0, n_labels=4, a=0.05)))
    out.append(("binary-rr(keep=0.8)", BinaryRR.from_keep(0.8)))
    out.append(("exp-gaussian(rate=2,-100..100)", ExpGaussian(2.0, -100.0, 100.0)))
    out.append(("laplace(scale=4)", LaplaceNull(4.0, 0, 9)))
    return out


def _figures(mech: Any) -> Arrays:
    out: Arrays = {}
    g = mech.guarantee
    flatten("guarantee", {"epsilon": g.epsilon, "delta": g.delta, "unit": g.unit}, out)
    flatten("epsilon", mech.epsilon, out)
    flatten("delta", mech.delta, out)
    flatten("uninformative", mech.uninformative, out)
    flatten("params", mech.params(), out)
    for k in (1, 2, 5, 20):
        flatten(f"answer_epsilon({k})", mech.answer_epsilon(k), out)
        flatten(f"release_epsilon({k})", mech.release_epsilon(k), out)
        c = g.compose(k)
        flatten(f"compose({k})", {"epsilon": c.epsilon, "delta": c.delta}, out)
    for attr in ("keep", "noise_std", "noise_mae", "sensitivity", "laplace_scale", "step"):
        with contextlib.suppress(Exception):
            flatten(attr, getattr(mech, attr), out)
    if hasattr(mech, "conditional_epsilons"):
        flips = np.array([0.1, 0.2, 0.3])
        flatten("conditional_epsilons", mech.conditional_epsilons(flips), out)
    if hasattr(mech, "delta_if_variance_revealed"):
        flatten("delta_if_variance_revealed(1)", mech.delta_if_variance_revealed(1.0), out)
    return out


def _budget(mech: Any) -> Arrays:
    from privtd.errors import BudgetExceededError
    from privtd.mechanisms import Budget

    budget = Budget(10.0, 1e-5)
    spent, refused = [], []
    for n in (1, 3, 10, 1, 30, 2):
        try:
            budget.charge(mech, n)
            refused.append(False)
        except BudgetExceededError:
            refused.append(True)
        spent.append(budget.spent_epsilon)
    return {
        "spent_epsilon": np.array(spent),
        "refused": np.array(refused),
        "spent_delta": np.array(budget.spent_delta),
    }


def _ceiling(mech: Any, folder: str) -> Arrays:
    from privtd.client import Ceiling, CeilingExceededError, largest_release

    out: Arrays = {}
    ceiling = Ceiling(Path(folder) / "ledger.json")
    campaign = {
        "name": "c",
        "mechanism": {
            "name": mech.name,
            "params": mech.params(),
            "epsilon": mech.epsilon,
            "unit": mech.unit,
        },
        "n_tasks": 100,
        "whole_row": mech.name in ("krr-null", "laplace", "two-layer-null", "mf"),
    }
    for k in (None, 1, 10, 100):
        try:
            figure = ceiling.check_campaign(campaign, k)
        except CeilingExceededError:
            figure = -1.0  # refused
        flatten(f"check_campaign({k})", figure, out)
    flatten("largest_release(3,100)", largest_release(mech, 3.0, 100), out)
    flatten("largest_release(1,100)", largest_release(mech, 1.0, 100), out)
    return out


def _small(data: Data, mech: Any) -> Any:
    if mech.name in ("krr-null", "laplace", "two-layer-null", "mf"):
        answers, _ = data.get("p3")
        cut = answers.subset(answers.task < 40)
        return cut
    if mech.name == "exp-gaussian":
        from privtd import Answers

        answers, _ = data.get("numeric")
        cut = answers.subset(answers.task < 30)
        clipped = np.clip(cut.value, 0.0, 10.0)
        return Answers(cut.task, cut.worker, clipped, cut.tasks, cut.workers)
    answers, _ = data.get("dog" if mech.n_labels > 2 else "duchenne")
    return answers.subset(answers.task < 60)


def _cli(args: list[str], tmp: str) -> tuple[int, str]:
    from privtd.cli import main

    buffer = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, buffer.getvalue().replace(tmp, "<TMP>")


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|inf|nan")


def printed_numbers(text: str) -> np.ndarray:
    return np.array([float(x) for x in _NUMBER.findall(text)], dtype=float)


def _leaves(prefix: str, obj: Any, out: Arrays) -> None:
    """A JSON document's numbers (and short strings), one key per leaf."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(f"{prefix}.{k}", v, out)
    elif isinstance(obj, list):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj):
            out[prefix] = np.array(obj, dtype=float)
        else:
            for i, v in enumerate(obj):
                _leaves(f"{prefix}[{i}]", v, out)
    elif isinstance(obj, bool):
        out[prefix] = np.array(obj)
    elif isinstance(obj, (int, float)):
        out[prefix] = np.array(float(obj))
    elif isinstance(obj, str) and len(obj) <= 40:
        out[prefix] = np.array(obj)
    elif obj is None:
        out[prefix] = np.array("<None>")


def _perturb_cli(data: Data, name: str, eps: float, params: dict[str, Any]) -> Arrays:
    with tempfile.TemporaryDirectory() as tmp:
        mech_kind = (
            "numeric"
            if name in ("exp-gaussian", "krr-null", "laplace", "two-layer-null", "mf")
            else "categorical"
        )
        if name == "exp-gaussian":
            answers, _ = data.get("emotion")
        elif mech_kind == "numeric":
            answers, _ = data.get("p3")
        else:
            answers, _ = data.get("dog" if params.get("K", 2) > 2 else "duchenne")
        answers = answers.subset(answers.task < 50)
        path = Path(tmp) / "answers.csv"
        answers.to_frame().to_csv(path, index=False)
        args = ["perturb", str(path), "-M", name, "-e", str(eps), "--seed", "7"]
        for k, v in params.items():
            if k != "K":
                args += ["-p", f"{k}={v}"]
        args += ["-o", str(Path(tmp) / "out.csv"), "--report", str(Path(tmp) / "report.json")]
        code, text = _cli(args, tmp)
        out: Arrays = {"exit": np.array(code), "printed": printed_numbers(text)}
        if code == 0:
            report = json.loads((Path(tmp) / "report.json").read_text())
            # One array per figure over the workers, not one key per worker.
            flatten("report.workers", pd.DataFrame.from_dict(report.pop("workers"), "index"), out)
            _leaves("report", report, out)
            out["output"] = digest(pd.read_csv(Path(tmp) / "out.csv").to_numpy().astype(str))
        eps_args = ["epsilon", "-M", name, "-e", str(eps), "-k", "20", "--json"]
        for k, v in params.items():
            if k == "K":
                eps_args += ["-p", f"n_labels={v}"]
            elif k != "d":
                eps_args += ["-p", f"{k}={v}"]
        code, text = _cli(eps_args, tmp)
        out["epsilon.exit"] = np.array(code)
        if code == 0:
            _leaves("epsilon", json.loads(text[text.index("{") :]), out)
        else:
            out["epsilon.printed"] = printed_numbers(text)
        return out


def privacy_cases(data: Data) -> Iterator[Case]:
    from privtd.mechanisms import (
        flip_epsilon,
        flip_for_epsilon,
        gaussian_delta,
        release_figures,
        worker_totals,
    )

    for label, mech in _mechanisms():
        yield f"privacy/figures/{label}", lambda mech=mech: _figures(mech)
        yield f"privacy/budget/{label}", lambda mech=mech: _budget(mech)

        def run_ceiling(mech: Any = mech) -> Arrays:
            with tempfile.TemporaryDirectory() as tmp:
                return _ceiling(mech, tmp)

        yield f"privacy/ceiling/{label}", run_ceiling

        def run_totals(mech: Any = mech) -> Arrays:
            out: Arrays = {}
            answers = _small(data, mech)
            flatten("worker_totals", worker_totals(answers, mech), out)
            flatten("release_figures(7)", release_figures(mech, 7), out)
            return out

        yield f"privacy/worker_totals/{label}", run_totals

    def run_helpers() -> Arrays:
        f = np.linspace(0.0, 0.7, 8)
        return {
            "flip_epsilon(K=2)": np.asarray(flip_epsilon(f[:6], 2), dtype=float),
            "flip_epsilon(K=5)": np.asarray(flip_epsilon(f, 5), dtype=float),
            "flip_for_epsilon": np.array(
                [flip_for_epsilon(e, k) for e in (0.1, 1.0, 3.0) for k in (2, 4)]
            ),
            "gaussian_delta": np.asarray(
                gaussian_delta(1.0, np.array([0.1, 0.5, 1.0, 2.0])), dtype=float
            ),
        }

    yield "privacy/helpers", run_helpers
    cli_settings = [
        ("one-layer", 1.0, {"K": 2}),
        ("one-layer", 2.0, {"K": 4}),
        ("two-layer", 1.0, {"K": 2}),
        ("two-layer", 2.0, {"K": 4}),
        ("binary-rr", 1.0, {"K": 2}),
        ("exp-gaussian", 2.0, {"low": -100, "high": 100}),
        ("krr-null", 1.0, {"low": 0, "high": 9}),
        ("laplace", 1.0, {"low": 0, "high": 9}),
        ("two-layer-null", 1.0, {"low": 0, "high": 9}),
        ("mf", 1.0, {"low": 0, "high": 9, "d": 5}),
    ]
    for name, eps, params in cli_settings:
        label = ",".join(f"{k}={v}" for k, v in params.items())
        yield (
            f"privacy/cli/{name}@{eps:g}({label})",
            lambda n=name, e=eps, p=params: _perturb_cli(data, n, e, p),
        )


def all_cases(data: Data, stack: contextlib.ExitStack) -> Iterator[Case]:
    yield from (
        (f"input/{n}", lambda n=n: answers_digest(data.get(n)[0]))
        for n in [*CATEGORICAL, *NUMERIC, "p3"]
    )
    yield from fit_cases(data)
    yield from aware_cases(data)
    yield from dask_cases(data, stack)
    yield from secure_cases(data)
    yield from privacy_cases(data)


# ---------------------------------------------------------------------- record
def backend() -> str:
    name = os.environ.get("PRIVTD_BACKEND", "").strip().lower()
    if name not in ("numpy", "numba"):
        sys.exit(
            "Set PRIVTD_BACKEND to numpy or numba: without it a fit's backend depends on its "
            "size and on what ran before it, and the two agree to 1e-9 only."
        )
    return name


def record(only: str | None = None, quiet: bool = False) -> tuple[Arrays, dict[str, Any]]:
    from privtd.inference._kernels import get_backend

    name = backend()
    assert get_backend() == name, (get_backend(), name)
    data = Data()
    arrays: Arrays = {}
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        for case, run in all_cases(data, stack):
            if only and only not in case:
                continue
            t0 = time.perf_counter()
            out = run()
            seconds[case] = time.perf_counter() - t0
            for key, value in out.items():
                arrays[f"{case}::{key}"] = value
            if not quiet:
                print(f"{seconds[case]:7.2f}s  {case}  ({len(out)} arrays)", flush=True)
    meta = {
        "format": FORMAT,
        "backend": name,
        "cases": sorted(seconds),
        "commit": _commit(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "numba": _version("numba"),
        "seconds": round(time.perf_counter() - start, 1),
        "only": only,
    }
    return arrays, meta


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except ImportError:
        return None


def _commit() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "src"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save(path: str, arrays: Arrays, meta: dict[str, Any]) -> None:
    # Many cases share arrays (a dataset's task ids, a posterior and its warm state): each
    # distinct array is stored once and every key points at it.
    keys = sorted(arrays)
    stored: dict[bytes, int] = {}
    payload: dict[str, np.ndarray] = {}
    refs = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        arr = np.asarray(arrays[key])
        tag = str(digest(arr)).encode()
        if tag not in stored:
            stored[tag] = len(stored)
            payload[f"a{stored[tag]}"] = arr
        refs[i] = stored[tag]
    payload["__keys__"] = np.array(keys, dtype=str)
    payload["__refs__"] = refs
    payload["__meta__"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **payload)  # type: ignore[arg-type]


def load(path: str) -> tuple[Arrays, dict[str, Any]]:
    with np.load(path, allow_pickle=False) as f:
        keys = [str(k) for k in f["__keys__"]]
        refs = f["__refs__"]
        distinct = {int(j): f[f"a{j}"] for j in np.unique(refs)}
        arrays = {k: distinct[int(j)] for k, j in zip(keys, refs, strict=True)}
        meta = json.loads(str(f["__meta__"]))
    return arrays, meta


# ---------------------------------------------------------------------- compare
def difference(a: np.ndarray, b: np.ndarray) -> tuple[bool, float, str]:
    """(equal within tolerance, largest relative difference, what differs)."""
    # np.savez keeps a 0-d array's shape but np.ascontiguousarray (older records) made it (1,).
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.shape != b.shape:
        return False, np.inf, f"shape {a.shape} -> {b.shape}"
    numeric_a, numeric_b = a.dtype.kind in "biuf", b.dtype.kind in "biuf"
    if not (numeric_a and numeric_b):
        if numeric_a != numeric_b:
            return False, np.inf, f"dtype {a.dtype} -> {b.dtype}"
        same = np.array_equal(a, b)
        return same, 0.0 if same else np.inf, "" if same else "labels/strings differ"
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        same = np.array_equal(a, b)
        return same, 0.0 if same else np.inf, "" if same else "integers differ"
    x, y = a.astype(np.float64), b.astype(np.float64)
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    if not np.array_equal(nan_x, nan_y):
        return False, np.inf, "NaN positions differ"
    ok = ~nan_x
    x, y = x[ok], y[ok]
    inf = np.isinf(x) | np.isinf(y)
    if not np.array_equal(x[inf], y[inf]):
        return False, np.inf, "infinities differ"
    x, y = x[~inf], y[~inf]
    if x.size == 0:
        return True, 0.0, ""
    gap = np.abs(x - y)
    scale = np.maximum(np.abs(x), np.abs(y))
    within = (gap <= RTOL * scale) | (gap <= ATOL)
    rel = np.where(gap <= ATOL, 0.0, gap / np.where(scale > 0, scale, 1.0))
    worst = float(rel.max())
    return bool(within.all()), worst, "" if within.all() else f"max rel diff {worst:.3g}"


def compare(before: tuple[Arrays, dict[str, Any]], after: tuple[Arrays, dict[str, Any]]) -> int:
    (a, meta_a), (b, meta_b) = before, after
    if meta_a["backend"] != meta_b["backend"]:
        print(
            f"Refusing to compare records of different backends: {meta_a['backend']} (before) "
            f"and {meta_b['backend']} (after). Record both with the same PRIVTD_BACKEND."
        )
        return 2
    print(f"backend {meta_a['backend']}: before {meta_a['commit']}, after {meta_b['commit']}")
    cases_a = set(meta_a["cases"])
    cases_b = set(meta_b["cases"])
    if meta_b.get("only"):
        cases_a = {c for c in cases_a if meta_b["only"] in c}
    by_case: dict[str, list[str]] = {}
    for key in a:
        case = key.split("::", 1)[0]
        if case in cases_a:
            by_case.setdefault(case, []).append(key)
    rows = []
    failures = 0
    for case in sorted(cases_a | cases_b):
        if case not in cases_b:
            rows.append((case, "MISSING", np.inf, "case not in after"))
            failures += 1
            continue
        if case not in cases_a:
            rows.append((case, "new", 0.0, "case not in before"))
            continue
        worst, problems = 0.0, []
        for key in sorted(by_case.get(case, [])):
            attr = key.split("::", 1)[1]
            if key not in b:
                problems.append(f"{attr}: missing after")
                worst = np.inf
                continue
            same, rel, why = difference(a[key], b[key])
            worst = max(worst, rel)
            if not same:
                problems.append(f"{attr}: {why}")
        new = [k.split("::", 1)[1] for k in b if k.startswith(case + "::") and k not in a]
        status = "FAIL" if problems else "ok"
        failures += bool(problems)
        note = "; ".join(problems[:4]) + (
            f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
        )
        if new:
            note += ("; " if note else "") + f"new after: {', '.join(new[:3])}"
        rows.append((case, status, worst, note))
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'case':<{width}}  status   max rel diff  notes")
    for case, status, worst, note in rows:
        shown = "inf" if np.isinf(worst) else f"{worst:.2e}"
        print(f"{case:<{width}}  {status:<7}  {shown:>12}  {note}")
    finite = [r[2] for r in rows if np.isfinite(r[2])]
    print(
        f"\n{len(rows)} cases, {failures} mismatched; largest difference among matching numbers "
        f"{max(finite, default=0.0):.2e} (tolerance {RTOL:g} relative, {ATOL:g} absolute)"
    )
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the current tree's outputs")
    rec.add_argument("out")
    rec.add_argument("--only", help="only the cases whose name contains this")
    cmp_ = sub.add_parser("compare", help="compare two records (or one with the current tree)")
    cmp_.add_argument("before")
    cmp_.add_argument("after", nargs="?")
    cmp_.add_argument("--only", help="with one record: re-run only the cases matching this")
    ls = sub.add_parser("list", help="list the case names")
    ls.add_argument("--only")
    args = parser.parse_args(argv)
    if args.command == "list":
        backend()
        with contextlib.ExitStack() as stack:
            names = [c for c, _ in all_cases(Data(), stack) if not args.only or args.only in c]
        print("\n".join(names))
        print(f"{len(names)} cases")
        return 0
    if args.command == "record":
        arrays, meta = record(args.only)
        save(args.out, arrays, meta)
        size = os.path.getsize(args.out)
        print(
            f"{len(meta['cases'])} cases, {len(arrays)} arrays, {meta['seconds']}s; wrote "
            f"{args.out} ({size / 1e6:.2f} MB)"
        )
        return 0
    before = load(args.before)
    if args.after:
        after = load(args.after)
    else:
        if before[1]["backend"] != backend():
            print(
                f"Refusing: {args.before} is a {before[1]['backend']} record and PRIVTD_BACKEND "
                f"is {backend()}."
            )
            return 2
        after = record(args.only, quiet=True)
    return compare(before, after)


if __name__ == "__main__":
    sys.exit(main())
