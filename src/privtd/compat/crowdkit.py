"""crowd-kit 1.4.2's aggregation classes, computed by privtd's estimators.

A crowd-kit user changes ``from crowdkit.aggregation import X`` to
``from privtd.compat.crowdkit import X`` and nothing else: the classes here take crowd-kit's
constructor arguments and defaults (``n_iter``, ``random_state``, ...), its method signatures
(``fit(data, true_labels)``, ``predict``, ``fit_predict_score``, ...), and return its output
names and shapes (``labels_`` a Series named ``agg_label`` indexed by ``task``, ``errors_``
indexed by (worker, label), lists from :class:`BinaryRelevance`, empty results on empty input).
A tie goes to the smallest label, as crowd-kit's own tests expect (crowd-kit 1.4.2 under
pandas 3 gives it to the label that appears first in the data instead).

The numbers come from :mod:`privtd.inference`; where privtd's model departs from crowd-kit's
(stopping rules, random starts), docs/reference.md, "Moving from crowd-kit", says how. privtd's
own classes keep privtd's names (``truths_``, ``max_iter``, ``rng``, ``gold=``) and its one-line
error on empty input.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd

from .. import inference
from ..answers import Answers
from ..errors import ConvergenceWarning, NotFittedError, ValidationError
from ..inference._base import Estimator
from ..inference._skill_vote import accuracy_against, skill_votes

__all__ = [
    "BinaryRelevance",
    "DawidSkene",
    "GLAD",
    "GoldMajorityVote",
    "KOS",
    "MACE",
    "MMSR",
    "MajorityVote",
    "MinimaxEntropy",
    "OneCoinDawidSkene",
    "Wawa",
    "ZenCrowd",
    "ZeroBasedSkill",
]

_COLUMNS = ["task", "worker", "label"]
#: crowd-kit clips confusion entries to this (and privtd's Dawid-Skene does too).
_EPS = 1e-10


class _GLAD(inference.GLAD):
    # crowd-kit's n_iter=0 is the model's start (a uniform vote for GLAD and zero-based
    # skill, MMSR's random skills).
    fewest_iterations = 0


class _ZeroBasedSkill(inference.ZeroBasedSkill):
    fewest_iterations = 0


class _MMSR(inference.MMSR):
    fewest_iterations = 0

    def _start(self, rng: np.random.Generator, n_w: int) -> tuple[np.ndarray, np.ndarray]:
        # crowd-kit draws u and v alike, from numpy's legacy generator seeded by
        # random_state: from that start privtd's steps reach crowd-kit's skills.
        if not isinstance(self.rng, (int, np.integer)):
            return super()._start(rng, n_w)
        start = np.random.RandomState(int(self.rng)).uniform(size=n_w)
        return start, start.copy()


class _Coded:
    """One crowd-kit answers table coded once for privtd, with crowd-kit's orders at hand."""

    def __init__(self, data: pd.DataFrame) -> None:
        frame = data[_COLUMNS]  # a missing column: crowd-kit's KeyError, naming it
        self.frame = frame
        self.empty = frame.shape[0] == 0
        if self.empty:
            return
        self.answers = Answers.from_frame(frame, answer="label", kind="categorical")
        labels = self.answers.labels
        assert labels is not None
        try:  # the labels in the input's own dtype (pandas' str, bool, ...), as crowd-kit's
            labels = labels.astype(frame["label"].dtype)
        except (TypeError, ValueError):
            pass
        self.labels = labels

    @property
    def tasks(self) -> pd.Index:
        return self.answers.tasks

    @property
    def workers(self) -> pd.Index:
        return self.answers.workers

    def labels_series(self, codes: np.ndarray, *, sort: bool = False) -> pd.Series:
        series = pd.Series(self.labels.take(codes), index=self.tasks, name="agg_label")
        return _sorted(series) if sort else series

    def probas_frame(
        self,
        proba: np.ndarray,
        *,
        sort: bool = False,
        name: str | None = "label",
    ) -> pd.DataFrame:
        frame = pd.DataFrame(proba, index=self.tasks, columns=self.labels.rename(name))
        return _sorted(frame) if sort else frame

    def workers_series(self, values: np.ndarray, name: str, *, sort: bool = False) -> pd.Series:
        series = pd.Series(values, index=self.workers, name=name)
        return _sorted(series) if sort else series

    def gold(self, true_labels: pd.Series | None) -> pd.Series | None:
        """crowd-kit's true labels for the tasks in the data (it ignores the others)."""
        if true_labels is None:
            return None
        return true_labels[self.tasks.get_indexer(true_labels.index) >= 0]


def _sorted(obj: Any) -> Any:
    """``obj`` sorted by its index where the ids compare (crowd-kit's group-by order)."""
    try:
        return obj.sort_index()
    except TypeError:
        return obj


def _fit(estimator: Estimator, coded: _Coded, gold: pd.Series | None = None) -> Any:
    # crowd-kit runs n_iter iterations without a word; privtd's warning that max_iter ended
    # the fit would be noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(coded.answers, gold=gold)


def _proba(est: Estimator) -> np.ndarray:
    proba = est._proba
    assert proba is not None  # every model fitted here has posteriors
    return proba


def _empty_labels(dtype: Any = object) -> pd.Series:
    return pd.Series([], dtype=dtype, name="agg_label")


def _accuracy(coded: _Coded, codes: np.ndarray, *, sort: bool = True) -> pd.Series:
    """Each worker's share of answers equal to ``codes`` per task: crowd-kit's skills of a
    vote, its workers sorted."""
    return coded.workers_series(accuracy_against(coded.answers, codes), "skill", sort=sort)


class _Aggregator:
    """What every class here shares: parameters by name, crowd-kit's repr and fit_predict."""

    _params: ClassVar[tuple[str, ...]] = ()

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def fit(self, data: pd.DataFrame) -> _Aggregator:
        raise NotImplementedError

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        """Fit on ``data`` and return ``labels_``."""
        self.fit(data)
        return self.labels_

    labels_: pd.Series
    probas_: pd.DataFrame


class _WithProbas(_Aggregator):
    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """Fit on ``data`` and return ``probas_``."""
        self.fit(data)
        return self.probas_


# ---------------------------------------------------------------------------------- votes
class MajorityVote(_WithProbas):
    """crowd-kit's ``MajorityVote``: the most frequent label per task, or the label with the
    largest sum of ``skills`` when they are given (privtd: :class:`privtd.inference.MajorityVote`).

    ``on_missing_skill`` says what to do with a worker ``skills`` does not name: "error",
    "ignore" (drop the answers) or "value" (use ``default_skill``). ``skills_`` is each
    worker's share of answers equal to the result.
    """

    _params = ("default_skill", "on_missing_skill")

    def __init__(self, default_skill: float | None = None, on_missing_skill: str = "error") -> None:
        self.default_skill = default_skill
        self.on_missing_skill = on_missing_skill

    def fit(self, data: pd.DataFrame, skills: pd.Series | None = None) -> MajorityVote:
        coded = _Coded(data)
        if skills is not None:
            coded = self._with_skills(coded, skills)
            return self._weighted(coded, skills) if not coded.empty else self._empty()
        if coded.empty:
            return self._empty()
        est = _fit(inference.MajorityVote(), coded)
        proba, codes = _proba(est), est._truth_codes
        self.probas_ = coded.probas_frame(proba)
        self.labels_ = coded.labels_series(codes)
        self.skills_ = _accuracy(coded, codes)
        return self

    def fit_predict(self, data: pd.DataFrame, skills: pd.Series | None = None) -> pd.Series:
        return self.fit(data, skills).labels_

    def fit_predict_proba(
        self, data: pd.DataFrame, skills: pd.Series | None = None
    ) -> pd.DataFrame:
        return self.fit(data, skills).probas_

    def _empty(self) -> MajorityVote:
        self.probas_ = pd.DataFrame(
            index=pd.Index([], name="task"), columns=pd.Index([], name="label")
        )
        self.labels_ = _empty_labels()
        self.skills_ = pd.Series([], dtype=float, name="skill", index=pd.Index([], name="worker"))
        return self

    def _with_skills(self, coded: _Coded, skills: pd.Series) -> _Coded:
        """The answers a weighted vote counts, by ``on_missing_skill``."""
        policy = self.on_missing_skill
        if policy != "value" and self.default_skill is not None:
            raise ValueError(
                'default_skill is used but on_missing_skill is not "value": pass '
                'on_missing_skill="value" with it, or drop it.'
            )
        if policy not in ("error", "ignore", "value"):
            raise ValueError(
                f"Unknown option {policy!r} of on_missing_skill: use 'error', 'ignore' or 'value'."
            )
        if coded.empty:
            return coded
        # Per worker, then per answer: a hash lookup per worker, not per answer.
        known = (skills.index.get_indexer(coded.workers) >= 0)[coded.answers.worker]
        if policy == "error" and not known.all():
            raise ValueError(
                f"Skill value is missing in {int((~known).sum())} assignments: give skills for "
                "every worker, or pass on_missing_skill='ignore' or 'value'."
            )
        if policy == "value" and self.default_skill is None:
            raise ValueError(
                'Default skill value must be specified when using on_missing_skill="value".'
            )
        if policy == "ignore" and not known.all():
            kept = coded.frame[known]
            lost = coded.frame["task"].nunique() - kept["task"].nunique()
            if lost:
                raise ValueError(
                    f"{lost} tasks has no workers with known skills: give a skill to at least "
                    "one worker of every task, or pass on_missing_skill='value'."
                )
            return _Coded(kept)
        return coded

    def _weighted(self, coded: _Coded, skills: pd.Series) -> MajorityVote:
        skill = skills.reindex(coded.workers).to_numpy(dtype=np.float64)
        if self.default_skill is not None:
            skill = np.where(np.isnan(skill), float(self.default_skill), skill)
        scores = skill_votes(coded.answers, skill)
        # crowd-kit's probabilities are the weighted votes over their sum, and its label the
        # largest of them (a task whose skills sum below 0 gets its smallest vote).
        with np.errstate(divide="ignore", invalid="ignore"):
            proba = scores / scores.sum(axis=1, keepdims=True)
        codes = np.argmax(np.where(np.isnan(proba), -np.inf, proba), axis=1)
        self.probas_ = coded.probas_frame(proba, sort=True)
        self.labels_ = coded.labels_series(codes, sort=True)
        self.skills_ = _accuracy(coded, codes)
        return self


def _predict_with_skills(model: Any, data: pd.DataFrame) -> MajorityVote:
    """A fitted skill model's labels for ``data``: the vote weighted by its ``skills_``."""
    skills = model.__dict__.get("skills_")
    if skills is None:
        raise NotFittedError(f"This {type(model).__name__} is not fitted: call fit(data) first.")
    vote = MajorityVote().fit(data, skills)
    model.labels_ = vote.labels_
    return vote


class _SkillModel(_WithProbas):
    """crowd-kit's skill models: ``fit`` learns ``skills_``; ``predict`` votes with them."""

    skills_: pd.Series

    def predict(self, data: pd.DataFrame) -> pd.Series:
        """Labels for ``data``: the vote weighted by ``skills_``."""
        self.probas_ = _predict_with_skills(self, data).probas_
        return self.labels_

    def predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """``predict``'s vote shares."""
        self.predict(data)
        return self.probas_

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        self.fit(data)
        return self.predict(data)

    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        self.fit(data)
        return self.predict_proba(data)


class Wawa(_SkillModel):
    """crowd-kit's ``Wawa``: skills are agreement with the majority vote; ``predict`` votes
    with them."""

    def fit(self, data: pd.DataFrame) -> Wawa:
        self.skills_ = MajorityVote().fit(data).skills_
        return self


class ZeroBasedSkill(_SkillModel):
    """crowd-kit's ``ZeroBasedSkill`` (privtd: :class:`privtd.inference.ZeroBasedSkill`, run
    for all ``n_iter`` steps as crowd-kit does)."""

    _params = ("n_iter", "lr_init", "lr_steps_to_reduce", "lr_reduce_factor", "eps")

    def __init__(
        self,
        n_iter: int = 100,
        lr_init: float = 1.0,
        lr_steps_to_reduce: int = 20,
        lr_reduce_factor: float = 0.5,
        eps: float = 1e-5,
    ) -> None:
        self.n_iter = n_iter
        self.lr_init = lr_init
        self.lr_steps_to_reduce = lr_steps_to_reduce
        self.lr_reduce_factor = lr_reduce_factor
        self.eps = eps

    def fit(self, data: pd.DataFrame) -> ZeroBasedSkill:
        coded = _Coded(data)
        if coded.empty:
            raise ValidationError("The answers table is empty: ZeroBasedSkill needs answers.")
        # tol=0: stop only once the skills stand still, after which crowd-kit's remaining
        # steps change nothing either.
        est = _ZeroBasedSkill(
            max_iter=self.n_iter,
            tol=0.0,
            lr_init=self.lr_init,
            lr_steps_to_reduce=self.lr_steps_to_reduce,
            lr_reduce_factor=self.lr_reduce_factor,
            eps=self.eps,
        )
        _fit(est, coded)
        self.skills_ = _sorted(coded.workers_series(est.weights_["weight"].to_numpy(), "skill"))
        return self


class GoldMajorityVote(_SkillModel):
    """crowd-kit's ``GoldMajorityVote``: skills are each worker's accuracy on the tasks with a
    true label; ``predict`` votes with them (a worker without one is an error there)."""

    def fit(self, data: pd.DataFrame, true_labels: pd.Series) -> GoldMajorityVote:  # type: ignore[override]
        coded = _Coded(data)
        if coded.empty:
            self.skills_ = pd.Series(
                [], dtype=float, name="skill", index=pd.Index([], name="worker")
            )
            return self
        gold = coded.gold(true_labels)
        assert gold is not None
        answers, k = coded.answers, coded.answers.n_labels
        # A task may have several true labels; an answer equal to any of them is right.
        gold_tasks = answers.encode_tasks(gold.index, "true_labels").astype(np.int64)
        gold_pairs = gold_tasks * k + answers.encode_labels(
            pd.Index(gold.to_numpy()), "true_labels"
        )
        task = answers.task.astype(np.int64)
        checked = np.isin(task, gold_tasks)
        right = np.isin(task * k + answers.value, gold_pairs)
        n_w = answers.n_workers
        total = np.bincount(answers.worker[checked], minlength=n_w)
        hits = np.bincount(answers.worker[right], minlength=n_w)
        skills = coded.workers_series(hits / np.maximum(total, 1), "skill")[total > 0]
        self.skills_ = _sorted(skills)
        return self

    def fit_predict(self, data: pd.DataFrame, true_labels: pd.Series) -> pd.Series:  # type: ignore[override]
        return self.fit(data, true_labels).predict(data)

    def fit_predict_proba(self, data: pd.DataFrame, true_labels: pd.Series) -> pd.DataFrame:  # type: ignore[override]
        return self.fit(data, true_labels).predict_proba(data)


# ---------------------------------------------------------------------------- Dawid-Skene
class _SeededDawidSkene(inference.DawidSkene):
    """privtd's Dawid-Skene whose first M-step takes crowd-kit's ``initial_error``, and which
    accepts ``max_iter=0`` (the start: majority-vote posteriors and their confusions)."""

    def __init__(
        self,
        max_iter: int,
        tol: float,
        initial_error: pd.DataFrame | None,
        strategy: str | None,
        labels: pd.Index,
    ) -> None:
        super().__init__(max_iter=max_iter, tol=tol)
        self._initial_error = initial_error
        self._strategy = strategy
        self._labels = labels

    fewest_iterations = 0

    def _start_counts(self, counts: np.ndarray) -> np.ndarray:
        initial, strategy = self._initial_error, self._strategy
        if initial is None or strategy is None:
            return counts
        answers = self._answers
        k = answers.n_labels
        grid = pd.MultiIndex.from_product(
            [answers.workers, self._labels], names=["worker", "label"]
        )
        if list(initial.index.names) != ["worker", "label"]:
            raise ValueError(
                f"The index of initial_error must be: ['worker', 'label'], but got: "
                f"{list(initial.index.names)}."
            )
        given = np.bincount(
            answers.worker.astype(np.int64) * k + answers.value, minlength=len(grid)
        ).astype(bool)
        if strategy == "assign":
            missing = ~grid[given].isin(initial.index)
            if missing.any():
                lacking = grid[given][missing].get_level_values("worker").unique()
                raise ValueError(
                    "All the workers in data should be in initial_error: cannot find "
                    f"{len(lacking)} workers' error matrix in initial_error."
                )
            if (initial <= 1.0).all().all() and not np.allclose(
                initial.groupby(level="worker", sort=False).sum(), 1.0
            ):
                raise ValueError(
                    "The sum of each worker's error matrix in initial_error should be 1.0."
                )
            seeded = initial.reindex(index=grid, columns=self._labels).fillna(0.0)
            # A copy: the first M-step normalises it in place.
            return seeded.to_numpy(dtype=np.float64, copy=True)
        if strategy == "addition":
            extra = initial.reindex(index=grid, columns=self._labels).fillna(0.0)
            return counts + extra.to_numpy(dtype=np.float64)
        raise ValueError(
            f"Invalid initial_error_strategy: {strategy!r}; use 'assign' or 'addition'."
        )


class _OneCoin(inference.OneCoinDawidSkene):
    fewest_iterations = 0


def _empty_dawid_skene(model: Any) -> Any:
    model.probas_ = pd.DataFrame()
    model.priors_ = pd.Series(dtype=float, name="prior")
    model.errors_ = pd.DataFrame()
    model.labels_ = _empty_labels(float)
    return model


def _given_pairs(coded: _Coded) -> tuple[pd.MultiIndex, np.ndarray]:
    """The (worker, label given) pairs that occur, as crowd-kit's ``errors_`` rows, and their
    rows in privtd's (worker, label) grid."""
    answers = coded.answers
    k = answers.n_labels
    flat = np.asarray(pd.unique(answers.worker.astype(np.int64) * k + answers.value))
    index = pd.MultiIndex.from_arrays(
        [answers.workers.take(flat // k), coded.labels.take(flat % k)], names=["worker", "label"]
    )
    return index, flat


class DawidSkene(_WithProbas):
    """crowd-kit's ``DawidSkene`` (privtd: :class:`privtd.inference.DawidSkene`), with its
    ``true_labels`` (gold tasks fixed) and ``initial_error`` (prior confusion counts, assigned
    or added at the first M-step)."""

    _params = ("n_iter", "tol", "initial_error_strategy")

    def __init__(
        self,
        n_iter: int = 100,
        tol: float = 1e-5,
        initial_error_strategy: Literal["assign", "addition"] | None = None,
    ) -> None:
        self.n_iter = n_iter
        self.tol = tol
        self.initial_error_strategy = initial_error_strategy

    def fit(
        self,
        data: pd.DataFrame,
        true_labels: pd.Series | None = None,
        initial_error: pd.DataFrame | None = None,
    ) -> DawidSkene:
        coded = _Coded(data)
        if coded.empty:
            return _empty_dawid_skene(self)
        est = _SeededDawidSkene(
            self.n_iter, self.tol, initial_error, self.initial_error_strategy, coded.labels
        )
        _fit(est, coded, coded.gold(true_labels))
        self._results(coded, est, est.confusions_.to_numpy())
        if (
            self.n_iter == 0
            and self.initial_error_strategy == "assign"
            and initial_error is not None
        ):
            # Before any iteration crowd-kit's errors_ is the initial_error it was given,
            # normalised, row for row.
            full = est.confusions_.rename_axis(columns=None)
            self.errors_ = full.reindex(initial_error.index)
        return self

    def fit_predict(
        self,
        data: pd.DataFrame,
        true_labels: pd.Series | None = None,
        initial_error: pd.DataFrame | None = None,
    ) -> pd.Series:
        return self.fit(data, true_labels, initial_error).labels_

    def fit_predict_proba(
        self,
        data: pd.DataFrame,
        true_labels: pd.Series | None = None,
        initial_error: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        return self.fit(data, true_labels, initial_error).probas_

    def _results(self, coded: _Coded, est: Any, confusion: np.ndarray) -> None:
        """crowd-kit's outputs from a fitted privtd model and its confusion rows
        ``(worker * K + label given, truth)``."""
        proba = _proba(est)
        self.probas_ = coded.probas_frame(proba)
        self.labels_ = coded.labels_series(proba.argmax(axis=1))
        self.priors_ = pd.Series(est.priors_.to_numpy(), index=coded.labels, name="prior")
        rows, flat = _given_pairs(coded)
        self.errors_ = pd.DataFrame(confusion[flat], index=rows, columns=coded.labels.rename(None))
        self.loss_history_ = [float(v) for v in est.objective_]


class OneCoinDawidSkene(DawidSkene):
    """crowd-kit's ``OneCoinDawidSkene`` (privtd: :class:`privtd.inference.OneCoinDawidSkene`):
    ``skills_`` is each worker's accuracy; ``errors_`` spreads ``1 - skill`` evenly over the
    other labels."""

    def fit(self, data: pd.DataFrame) -> OneCoinDawidSkene:  # type: ignore[override]
        coded = _Coded(data)
        if coded.empty:
            return _empty_dawid_skene(self)
        est = _fit(_OneCoin(max_iter=self.n_iter, tol=self.tol), coded)
        skill = est.weights_["weight"].to_numpy()
        k = coded.answers.n_labels
        right = np.clip(skill, _EPS, 1 - _EPS)
        wrong = np.clip((1 - skill) / (k - 1), _EPS, 1 - _EPS)
        cube = np.repeat(wrong[:, None, None], k, axis=1).repeat(k, axis=2)
        cube[:, np.arange(k), np.arange(k)] = right[:, None]
        self._results(coded, est, cube.reshape(-1, k))
        self.skills_ = coded.workers_series(skill, "skill")
        return self

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:  # type: ignore[override]
        return self.fit(data).labels_

    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:  # type: ignore[override]
        return self.fit(data).probas_


# ------------------------------------------------------------------------ the other models
def _one_prior(name: str, value: pd.Series | None) -> float:
    """A per-worker (per-task) prior mean that is the same for everyone, as a number: privtd's
    GLAD takes one mean for all."""
    if value is None:
        return 1.0
    values = np.unique(np.asarray(value, dtype=np.float64))
    if len(values) != 1:
        raise ValidationError(
            f"privtd's GLAD takes one {name} for everyone; these differ. Pass equal values "
            "or use crowdkit.aggregation.GLAD."
        )
    return float(values[0])


class GLAD(_WithProbas):
    """crowd-kit's ``GLAD`` (privtd: :class:`privtd.inference.GLAD`). ``betas_`` is crowd-kit's
    ``log beta``; the class prior is uniform (a non-uniform ``labels_priors`` is refused)."""

    _params = (
        "n_iter",
        "tol",
        "silent",
        "labels_priors",
        "alphas_priors_mean",
        "betas_priors_mean",
        "m_step_max_iter",
        "m_step_tol",
    )

    def __init__(
        self,
        n_iter: int = 100,
        tol: float = 1e-5,
        silent: bool = True,
        labels_priors: pd.Series | None = None,
        alphas_priors_mean: pd.Series | None = None,
        betas_priors_mean: pd.Series | None = None,
        m_step_max_iter: int = 25,
        m_step_tol: float = 1e-2,
    ) -> None:
        self.n_iter = n_iter
        self.tol = tol
        self.silent = silent
        self.labels_priors = labels_priors
        self.alphas_priors_mean = alphas_priors_mean
        self.betas_priors_mean = betas_priors_mean
        self.m_step_max_iter = m_step_max_iter
        self.m_step_tol = m_step_tol

    def fit(self, data: pd.DataFrame) -> GLAD:
        coded = _Coded(data)
        if coded.empty:
            raise ValidationError("The answers table is empty: GLAD needs answers.")
        k = coded.answers.n_labels
        if self.labels_priors is not None and not np.allclose(
            np.asarray(self.labels_priors, dtype=np.float64), 1.0 / k
        ):
            raise ValidationError(
                "privtd's GLAD keeps the class prior uniform, as the paper does; drop "
                "labels_priors or use crowdkit.aggregation.GLAD."
            )
        est = _GLAD(
            max_iter=self.n_iter,
            tol=self.tol,
            alpha_prior=_one_prior("alphas_priors_mean", self.alphas_priors_mean),
            beta_prior=_one_prior("betas_priors_mean", self.betas_priors_mean),
            m_step_max_iter=self.m_step_max_iter,
            m_step_tol=self.m_step_tol,
        )
        _fit(est, coded)
        proba = _proba(est)
        self.probas_ = coded.probas_frame(proba, sort=True, name="variable")
        self.labels_ = coded.labels_series(proba.argmax(axis=1), sort=True)
        self.alphas_ = coded.workers_series(est.weights_["weight"].to_numpy(), "alpha")
        self.betas_ = pd.Series(np.log(np.asarray(est.betas_)), index=coded.tasks, name="beta")
        labels = coded.labels.rename(None)
        self.priors_ = pd.Series(1.0 / k, index=labels)
        self.loss_history_ = [float(v) for v in est.objective_]
        # The inputs as crowd-kit keeps them.
        self.prior_labels_ = labels.array
        self.tasks_, self.workers_ = coded.tasks.array, coded.workers.array
        self.alphas_priors_mean_ = pd.Series(est.alpha_prior, index=coded.workers.rename(None))
        self.betas_priors_mean_ = pd.Series(est.beta_prior, index=coded.tasks.rename(None))
        return self


class MACE(_WithProbas):
    """crowd-kit's ``MACE`` (privtd: :class:`privtd.inference.MACE`, ``n_iter`` iterations per
    restart). ``spamming_`` rows follow the workers' first appearance (columns: spamming,
    competence), ``thetas_`` rows and columns sorted worker and label order, as crowd-kit's;
    the restarts are drawn from one generator seeded by ``random_state``."""

    _params = (
        "n_restarts",
        "n_iter",
        "method",
        "smoothing",
        "default_noise",
        "alpha",
        "beta",
        "random_state",
        "verbose",
    )

    def __init__(
        self,
        n_restarts: int = 10,
        n_iter: int = 50,
        method: str = "vb",
        smoothing: float = 0.1,
        default_noise: float = 0.5,
        alpha: float = 0.5,
        beta: float = 0.5,
        random_state: int = 0,
        verbose: int = 0,
    ) -> None:
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.method = method
        self.smoothing = smoothing
        self.default_noise = default_noise
        self.alpha = alpha
        self.beta = beta
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, data: pd.DataFrame) -> MACE:
        coded = _Coded(data)
        if coded.empty:
            raise ValidationError("The answers table is empty: MACE needs answers.")
        # crowd-kit smooths by 0.01 / K whatever its `smoothing` says; privtd's None is that.
        est = inference.MACE(
            n_restarts=self.n_restarts,
            max_iter=self.n_iter,
            min_iter=self.n_iter,
            method=self.method,
            alpha=self.alpha,
            beta=self.beta,
            default_noise=self.default_noise,
            rng=self.random_state,
        )
        _fit(est, coded)
        n_w, k = coded.answers.n_workers, coded.answers.n_labels
        proba = _proba(est)
        self.probas_ = coded.probas_frame(proba, name=None)
        self.labels_ = coded.labels_series(proba.argmax(axis=1))
        self.spamming_ = est.weights_[["spam", "weight"]].to_numpy()
        worker_rows = np.argsort(coded.workers.to_numpy(), kind="stable")
        self.thetas_ = np.asarray(est.strategies_)[worker_rows]
        self.smoothing_ = 0.01 / k
        vb = self.method == "vb"
        self.theta_priors_ = np.tile([self.alpha, self.beta], (n_w, 1)) if vb else None
        self.strategy_priors_ = np.full((n_w, k), 10.0) if vb else None
        return self


class KOS(_Aggregator):
    """crowd-kit's ``KOS`` for two labels (privtd: :class:`privtd.inference.KOS`, its random
    start drawn from ``random_state``)."""

    _params = ("n_iter", "random_state")

    def __init__(self, n_iter: int = 100, random_state: int = 0) -> None:
        self.n_iter = n_iter
        self.random_state = random_state

    def fit(self, data: pd.DataFrame) -> KOS:
        coded = _Coded(data)
        if coded.empty:
            self.labels_ = _empty_labels()
            return self
        est = _fit(inference.KOS(max_iter=self.n_iter, tol=0.0, rng=self.random_state), coded)
        self.labels_ = coded.labels_series(est._truth_codes, sort=True)
        return self


class MMSR(_Aggregator):
    """crowd-kit's ``MMSR`` (privtd: :class:`privtd.inference.MMSR`): ``fit`` learns
    ``skills_``; ``predict`` votes with them, ``scores_`` the vote shares."""

    _params = ("n_iter", "tol", "random_state")

    def __init__(self, n_iter: int = 10000, tol: float = 1e-10, random_state: int | None = 0):
        self.n_iter = n_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, data: pd.DataFrame) -> MMSR:
        coded = _Coded(data)
        if coded.empty:
            raise ValidationError("The answers table is empty: MMSR needs answers.")
        est = _MMSR(max_iter=self.n_iter, tol=self.tol, rng=self.random_state)
        _fit(est, coded)
        self.skills_ = coded.workers_series(est.weights_["weight"].to_numpy(), "skill")
        self.loss_history_ = [float(v) for v in est.objective_]
        return self

    def predict(self, data: pd.DataFrame) -> pd.Series:
        """Labels for ``data``: the vote weighted by ``skills_``."""
        self.scores_ = _predict_with_skills(self, data).probas_
        return self.labels_

    def predict_score(self, data: pd.DataFrame) -> pd.DataFrame:
        """``predict``'s vote shares (``scores_``)."""
        self.predict(data)
        return self.scores_

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        return self.fit(data).predict(data)

    def fit_predict_score(self, data: pd.DataFrame) -> pd.DataFrame:
        return self.fit(data).predict_score(data)


class _Iterative(_WithProbas):
    """A privtd model crowd-kit lacks, under crowd-kit's conventions: ``n_iter`` and ``tol``,
    ``labels_``, ``probas_``, ``skills_`` (its worker weight) and ``loss_history_``."""

    _params: ClassVar[tuple[str, ...]] = ("n_iter", "tol")
    _model: ClassVar[type[Estimator]]

    def __init__(self, n_iter: int = 100, tol: float = 1e-5) -> None:
        self.n_iter = n_iter
        self.tol = tol

    def _estimator(self) -> Estimator:
        return self._model(max_iter=self.n_iter, tol=self.tol)  # type: ignore[call-arg]

    def fit(self, data: pd.DataFrame) -> _Iterative:
        coded = _Coded(data)
        if coded.empty:
            raise ValidationError(
                f"The answers table is empty: {type(self).__name__} needs answers."
            )
        est = _fit(self._estimator(), coded)
        proba = _proba(est)
        self.probas_ = coded.probas_frame(proba)
        self.labels_ = coded.labels_series(proba.argmax(axis=1))
        self.skills_ = coded.workers_series(est.weights_["weight"].to_numpy(), "skill")
        self.loss_history_ = [float(v) for v in est.objective_]
        return self


class ZenCrowd(_Iterative):
    """ZenCrowd (privtd: :class:`privtd.inference.ZenCrowd`): one accuracy per worker, the
    class prior fixed; ``skills_`` is that accuracy."""

    _model = inference.ZenCrowd


class MinimaxEntropy(_Iterative):
    """Minimax conditional entropy (privtd: :class:`privtd.inference.MinimaxEntropy`)."""

    _params = ("n_iter", "tol", "alpha", "beta", "m_step_max_iter", "m_step_tol")
    _model = inference.MinimaxEntropy

    def __init__(
        self,
        n_iter: int = 100,
        tol: float = 1e-5,
        alpha: float | None = None,
        beta: float | None = None,
        m_step_max_iter: int = 5,
        m_step_tol: float = 1e-7,
    ) -> None:
        super().__init__(n_iter, tol)
        self.alpha = alpha
        self.beta = beta
        self.m_step_max_iter = m_step_max_iter
        self.m_step_tol = m_step_tol

    def _estimator(self) -> Estimator:
        return inference.MinimaxEntropy(
            max_iter=self.n_iter,
            tol=self.tol,
            alpha=self.alpha,
            beta=self.beta,
            m_step_max_iter=self.m_step_max_iter,
            m_step_tol=self.m_step_tol,
        )


# ------------------------------------------------------------------------------ multi-label
class BinaryRelevance(_Aggregator):
    """crowd-kit's ``BinaryRelevance``: each label is a yes/no question aggregated by a fresh
    copy of ``base_aggregator`` (one of this module's classes); ``labels_`` holds, per task,
    the list of labels found present, and ``aggregators_`` the fitted copy per label."""

    _params = ("base_aggregator",)

    def __init__(self, base_aggregator: _Aggregator | None = None) -> None:
        if base_aggregator is None:
            base_aggregator = MajorityVote()
        if not isinstance(base_aggregator, _Aggregator) or isinstance(
            base_aggregator, BinaryRelevance
        ):
            raise ValidationError(
                "base_aggregator must be a classification aggregator from "
                f"privtd.compat.crowdkit, e.g. MajorityVote(). Got {base_aggregator!r}."
            )
        self.base_aggregator = base_aggregator

    def fit(self, data: pd.DataFrame) -> BinaryRelevance:
        frame = data[_COLUMNS].reset_index(drop=True)
        self.aggregators_: dict[Hashable, _Aggregator] = {}
        chosen = frame["label"].explode().dropna()
        classes = pd.Index(chosen.unique()).sort_values()
        rows = frame.index.get_indexer(chosen.index)
        codes = classes.get_indexer(chosen.to_numpy())
        member = np.zeros((len(frame), len(classes)), dtype=np.int64)
        member[rows, codes] = 1
        found: dict[Hashable, list[Hashable]] = {}
        for j, label in enumerate(classes):
            model = type(self.base_aggregator)(**self.base_aggregator.get_params())
            labels = model.fit_predict(frame[["task", "worker"]].assign(label=member[:, j]))
            self.aggregators_[label] = model
            for task, present in labels.items():
                chosen_for = found.setdefault(task, [])
                if present:
                    chosen_for.append(label)
        self.labels_ = pd.Series(found, dtype=float if not found else object, name="agg_label")
        if found:
            self.labels_.index.name = "task"
        return self
