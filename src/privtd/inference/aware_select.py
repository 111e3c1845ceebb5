"""Perturbation-aware model selection: the aware worker model the perturbed answers support best.

The aware models differ in how much they let each worker have of its own, and which one a data
set supports depends on how many answers each worker gave and how much of them the channel
kept. Per-worker confusions (:class:`AwareDawidSkene`) win on a large crowd whose workers differ
and whose answers survive the channel; on a small crowd, or when randomized response leaves
little of each answer, their per-worker estimates are mostly noise and a model that shares one
confusion across all workers (a weighted majority vote with a learned bias) does better. One
accuracy per worker (:class:`AwareOneCoin`) sits between.

:class:`AwareSelect` fits each candidate and keeps the one with the highest held-out predictive
log-likelihood of the perturbed answers (``folds``-fold cross-validation over answers, Stone
1974; Geisser 1975). For each fold, every candidate is fitted on the other answers; a held-out
answer ``z`` of worker ``u`` on task ``q`` is then predicted as

    P(z) = sum_y mu_q(y) C_u[z, y],

with ``mu_q`` the task's posterior given its other answers (the class prior for a task with
none) and ``C_u`` the worker's *observed* confusion: its own confusion composed with the
mechanism's channel (averaged over the flip posterior under two-layer: ``R_f`` is affine in
``f``, so that is ``R_{E f}`` composed; a worker with no other answers gets the crowd's mean).
The score is the mean of ``log P(z)`` over all answers. It judges each model by what it predicts
about answers it did not see, so per-worker parameters are paid for only where they generalise,
with no penalty to tune. The chosen model is fitted once more on all the answers, and its truths
are read with the decision it would use by name (balanced under a mechanism).

It is asked for by name, not the default of ``privtd infer --mechanism``: the answers' likelihood
rewards a model for each worker's habits (how often it gives each label), which predict answers
without helping the truths, and on Web and Duchenne it picks ``aware-ds`` where the one-coin model
or majority vote recover the truths better (docs/inference.md, "Choosing the aware model from the
data").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..answers import Answers
from ..errors import ValidationError
from ._base import Estimator, Gold, _check_int, confusion_frame
from ._tags import RANDOMIZED_RESPONSE, Tags
from .aware_dawid_skene import AwareDawidSkene
from .decision import check_decision
from .perturbation_aware import AwareOneCoin

#: The candidates, in the order ties are broken (the simplest first).
CANDIDATES = ("pooled", "aware-one-coin", "aware-ds")


def observed_confusions(name: str, fit: Estimator, k: int) -> np.ndarray:
    """``C[u, z, y]``: the probability that worker ``u``'s report is ``z`` when the truth is
    ``y``, the channel included, from a fitted candidate."""
    if name == "aware-one-coin":
        acc = fit.weights_["weight"].to_numpy()[:, None, None]
        eye = np.eye(k)[None]
        return acc * eye + (1.0 - acc) / (k - 1) * (1.0 - eye)
    pi = fit.confusions_.to_numpy().reshape(-1, k, k)
    f = fit.weights_["flip"].to_numpy()[:, None, None]
    # R_f pi = (1 - f K / (K - 1)) pi + f / (K - 1) (columns of pi sum to 1).
    return (1.0 - f * k / (k - 1)) * pi + f / (k - 1)


def pooled_answers(answers: Answers) -> Answers:
    """The answers as if one worker gave them all: one confusion shared by the crowd."""
    return Answers(
        answers.task,
        np.zeros(answers.n_answers, dtype=np.int32),
        answers.value,
        answers.tasks,
        pd.Index(["(all workers)"]),
        answers.labels,
        answers.value_range,
        answers.notes,
    )


class AwareSelect(Estimator):
    """Of a pooled confusion, one accuracy per worker and a full confusion per worker (each
    composed with the mechanism's channel), the model with the best held-out predictive
    likelihood of the answers (see module doc). Under two-layer RR the pooled model has one flip
    for the crowd, whose reports it sees through the mean channel ``R_{E f}``.

    Parameters
    ----------
    mechanism : OneLayerRR, BinaryRR, TwoLayerRR or None
        The mechanism that produced the answers, with its public parameters.
    folds : int >= 2, default 5
        Folds of the cross-validation over answers.
    seed : int, default 0
        Seeds the split of the answers into folds: the fit is deterministic given it.
    decision : {None, "map", "balanced"}, default None
        How ``truths_`` are read from the chosen model's posteriors; None: "balanced" under a
        mechanism, "map" without one (as :class:`AwareDawidSkene`).
    max_iter : int, default 100
        Passed to each candidate.
    tol : float or None, default None
        Passed to each candidate; None: each candidate's own default.

    Notes
    -----
    Fitted: ``selected_`` (the chosen candidate: "pooled", "aware-one-coin" or "aware-ds"),
    ``heldout_loglik_`` (each candidate's held-out log-likelihood per answer, a Series, higher is
    better), ``estimator_`` (the chosen model fitted on all the answers; for "pooled" an
    :class:`AwareDawidSkene` on the answers with every worker merged into one), and the chosen
    model's ``truths_``, ``probas_``, ``priors_``, ``decision_``, ``weights_`` and, for the
    confusion models, ``confusions_`` (the pooled confusion repeated for every worker).
    """

    __privtd_tags__ = Tags("aware-select", mechanisms=RANDOMIZED_RESPONSE)

    iterative = True

    def __init__(
        self,
        mechanism: Any = None,
        *,
        folds: int = 5,
        seed: int = 0,
        decision: str | None = None,
        max_iter: int = 100,
        tol: float | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.folds = folds
        self.seed = seed
        self.decision = decision
        self.max_iter = max_iter
        self.tol = tol

    def _validate_params(self) -> None:
        super()._validate_params()
        name = type(self).__name__
        _check_int(name, "folds", self.folds, low=2)
        _check_int(name, "seed", self.seed, low=0)
        check_decision(name, self.decision)

    def _candidate(self, name: str) -> Estimator:
        params: dict[str, Any] = {"decision": self.decision, "max_iter": self.max_iter}
        if self.tol is not None:
            params["tol"] = self.tol
        if name == "aware-one-coin":
            return AwareOneCoin(self.mechanism, **params)
        # The candidates are compared by how well they predict held-out answers, which a
        # learned class prior does at any label count.
        return AwareDawidSkene(self.mechanism, class_prior="learned", **params)

    def _fit_candidate(self, name: str, answers: Answers, gold: pd.Series | None) -> Estimator:
        data = pooled_answers(answers) if name == "pooled" else answers
        return self._candidate(name).fit(data, gold=gold)

    def _fit(self, answers: Answers, gold: Gold | None) -> None:
        k = answers.n_labels
        assert answers.labels is not None  # categorical answers (Estimator.kinds)
        if answers.n_answers < self.folds:
            raise ValidationError(
                f"AwareSelect needs at least folds={self.folds} answers to cross-validate; got "
                f"{answers.n_answers}. Pass a method by name (aware-ds, aware-one-coin)."
            )
        gold_truth = (
            None
            if gold is None
            else pd.Series(answers.labels.take(gold.value), index=answers.tasks[gold.index])
        )
        fold = np.random.default_rng(self.seed).permutation(answers.n_answers) % self.folds
        loglik = dict.fromkeys(CANDIDATES, 0.0)
        for held in range(self.folds):
            test = fold == held
            train = answers.subset(~test)
            # Codes of the held-out answers' tasks and workers in the training answers (-1:
            # none of their answers is left there).
            t_in = np.bincount(answers.task[~test], minlength=answers.n_tasks) > 0
            w_in = np.bincount(answers.worker[~test], minlength=answers.n_workers) > 0
            t_code = np.where(t_in, np.cumsum(t_in) - 1, -1)[answers.task[test]]
            w_code = np.where(w_in, np.cumsum(w_in) - 1, -1)[answers.worker[test]]
            z = answers.value[test].astype(np.int64)
            fold_gold = (
                None if gold_truth is None else gold_truth[gold_truth.index.isin(train.tasks)]
            )
            share = train.worker_counts() / train.n_answers
            for name in CANDIDATES:
                fit = self._fit_candidate(name, train, fold_gold)
                conf = observed_confusions(name, fit, k)
                if name == "pooled":
                    conf = np.repeat(conf, train.n_workers, axis=0)
                # A worker none of whose answers is left for training: the crowd's mean.
                conf = np.concatenate([conf, np.tensordot(share, conf, axes=1)[None]])
                assert fit._proba is not None  # both aware models give posteriors
                mu = np.vstack([fit._proba, fit.priors_.to_numpy()[None]])[t_code]
                p = (mu * conf[w_code, z]).sum(axis=1)
                loglik[name] += float(np.log(np.maximum(p, 1e-300)).sum())
        self.heldout_loglik_ = pd.Series(
            {name: value / answers.n_answers for name, value in loglik.items()},
            name="heldout_loglik",
        )
        # The first of the best: candidates are listed simplest first.
        self.selected_ = str(self.heldout_loglik_.idxmax())
        fit = self._fit_candidate(self.selected_, answers, gold_truth)
        self.estimator_ = fit
        for key, value in vars(fit).items():
            if key.endswith("_") and not key.startswith("_") and key != "estimator_":
                setattr(self, key, value)
        if self.selected_ == "pooled":
            n_w = answers.n_workers
            shared = fit.weights_.iloc[[0] * n_w].set_axis(answers.workers)
            shared["n_answers"] = answers.worker_counts()
            self.weights_ = shared
            pi = fit.confusions_.to_numpy().reshape(1, k, k)
            self.confusions_ = confusion_frame(answers, np.repeat(pi, n_w, axis=0))
        self._answers = answers
        self._truth_codes = fit._truth_codes
        self._proba = fit._proba
