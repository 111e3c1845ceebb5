"""The estimators' tags and the lists read off them (all_estimators, the aware lookup, the Dask
list), and privtd.utils.estimator_checks on an estimator from outside privtd."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import privtd.inference as inference
from privtd.errors import ConvergenceWarning, ValidationError
from privtd.inference import (
    AWARE_METHOD,
    AWARE_METHODS,
    METHODS,
    RELEASE_METHODS,
    Estimator,
    Tags,
    all_estimators,
    clone,
    get_tags,
    make_estimator,
    takes_mechanism,
)
from privtd.inference._tags import EXECUTORS, method_tags
from privtd.mechanisms import MECHANISMS, OneLayerRR
from privtd.utils import estimator_checks
from privtd.utils.estimator_checks import check_estimator, parametrize_with_checks


def test_the_name_index_names_each_class_under_its_tag():
    # The index the CLI reads without importing (privtd.inference._METHOD_SPECS) and the
    # classes' own tags agree: a class renamed in one place only fails here.
    listed = all_estimators()
    assert [name for name, _ in listed] == [*METHODS, *RELEASE_METHODS]
    for name, cls in listed:
        assert method_tags(cls, name).name == name, cls
        assert "__privtd_tags__" in vars(cls), f"{cls.__name__} must declare its own tags"
        assert method_tags(cls, name).release_only == (name in RELEASE_METHODS), name
        # Each class once, under its tags' name, and again under its aware form's if it has one.
        form = get_tags(cls).aware_form
        assert [n for n, c in listed if c is cls] == [get_tags(cls).name] + (
            [form.name] if form else []
        ), cls


def test_tags_read_the_class_attributes_fit_acts_on():
    for name, cls in all_estimators():
        tags = method_tags(cls, name)
        assert tags.kinds == cls.kinds and tags.warm_start == cls.warm_starts
        assert tags.iterative == cls.iterative
        assert set(tags.mechanisms) <= set(MECHANISMS), cls
        assert set(tags.executors) <= set(EXECUTORS)
        # An aware estimator takes the mechanism; a plain one does not, unless the mechanism
        # makes it its aware form.
        assert (
            "mechanism"
            in inference.estimator_params(tags.name) + list(inspect.signature(cls).parameters)
        ) == (tags.aware or get_tags(cls).aware_form is not None), cls
        assert tags.aware == takes_mechanism(tags.name)
    assert get_tags(inference.LatentClass).binary_only
    assert not get_tags(inference.DawidSkene).binary_only
    assert get_tags(inference.DawidSkene()) == get_tags(inference.DawidSkene)


def test_all_estimators_filters():
    numeric = {name for name, _ in all_estimators(kind="numeric")}
    assert numeric == {"crh", "catd", "gtm", "aware-gaussian", "raykar", "sigma", "mean"} | {
        "median",
        "aware-null",
    }
    assert {name for name, _ in all_estimators(aware=True)} == AWARE_METHODS
    plain = {name for name, _ in all_estimators(aware=False)}
    assert plain | AWARE_METHODS == {*METHODS, *RELEASE_METHODS} and not plain & AWARE_METHODS
    assert [n for n, _ in all_estimators(executor="memory")] == [*METHODS, *RELEASE_METHODS]
    with pytest.raises(ValidationError, match="'kind' argument of all_estimators"):
        all_estimators(kind="text")
    with pytest.raises(ValidationError, match="'executor' argument of all_estimators"):
        all_estimators(executor="spark")


def test_aware_lookup_comes_from_the_tags():
    assert AWARE_METHOD == {
        "one-layer": "aware-ds",
        "two-layer": "aware-ds",
        "binary-rr": "aware-ds",
        "exp-gaussian": "aware-gaussian",
        "krr-null": "aware-null",
        "two-layer-null": "aware-null",
    }
    for mechanism, method in AWARE_METHOD.items():
        assert mechanism in get_tags(METHODS.get(method) or RELEASE_METHODS[method]).mechanisms
    assert inference.aware_method(MECHANISMS["two-layer"]) == "aware-ds"
    with pytest.raises(ValidationError, match="Unknown method 'nope'"):
        takes_mechanism("nope")


def test_two_defaults_for_one_mechanism_are_refused(monkeypatch):
    class Rival(inference.AwareOneCoin):
        __privtd_tags__ = Tags(
            "aware-one-coin", mechanisms=("one-layer",), default_for=("one-layer",)
        )

    real = inference.all_estimators
    monkeypatch.setattr(inference, "all_estimators", lambda **kw: [*real(**kw), ("rival", Rival)])
    with pytest.raises(RuntimeError, match="Both aware-ds and rival are tagged the default"):
        inference._aware_method()


def test_dask_list_is_the_tagged_classes_with_a_driver():
    pytest.importorskip("dask")
    from privtd.inference.distributed import DISTRIBUTED_METHODS, _fit

    tagged = {cls for _, cls in all_estimators(executor="dask")}
    assert tagged == set(_fit._DRIVERS)
    assert DISTRIBUTED_METHODS == tuple(name for name, _ in all_estimators(executor="dask"))
    assert inference.DISTRIBUTED_METHODS is DISTRIBUTED_METHODS
    rr = OneLayerRR(f=0.1, n_labels=2)
    refusal = _fit.not_distributed(inference.GLAD(rr))
    assert refusal.startswith("GLAD does not run on a Dask cluster yet")
    assert "conjugate gradients" in refusal and "aware-ds" in refusal
    # A class listed under two names runs on Dask under each name its tags say, and no other.
    for name, cls in all_estimators():
        if get_tags(cls).aware_form is not None:
            est = cls(rr if name == get_tags(cls).aware_form.name else None)
            assert (_fit._driver(est) is not None) == (name in DISTRIBUTED_METHODS), name
    # The deprecated aliases fit there as their model does.
    with pytest.warns(FutureWarning):
        assert _fit._driver(inference.AwareMACE(rr)) is _fit._DRIVERS[inference.MACE]
        assert _fit._driver(inference.AwareGLAD(rr)) is None
    assert "(" not in _fit.not_distributed(inference.Wawa)  # tagged with no reason


def test_tags_refuse_what_cannot_be():
    with pytest.raises(ValueError, match="executors must include 'memory'"):
        Tags("x", executors=("dask",))
    with pytest.raises(ValueError, match="default_for"):
        Tags("x", mechanisms=("one-layer",), default_for=("two-layer",))
    with pytest.raises(TypeError):
        Tags("x", kinds=("numeric",))  # type: ignore[call-arg]  # the class's kinds say it
    rr = ("one-layer",)
    for odd in (
        {"mechanisms": rr, "aware_form": Tags("aware-x", mechanisms=rr)},  # plain is aware
        {"aware_form": Tags("aware-x")},  # the aware form models nothing
        {"aware_form": Tags(mechanisms=rr)},  # ... or has no name
    ):
        with pytest.raises(ValueError, match="aware_form is the form of a plain model"):
            Tags("x", **odd)

    class Odd(inference.MajorityVote):
        __privtd_tags__ = {"name": "odd"}  # type: ignore[assignment]

    with pytest.raises(TypeError, match="must be a privtd.inference.Tags"):
        get_tags(Odd)


def test_set_params_and_clone():
    est = make_estimator("ds", max_iter=7)
    assert est.set_params(tol=0.5) is est and est.tol == 0.5
    with pytest.raises(ValidationError, match="DawidSkene has no parameter 'bogus'; its"):
        est.set_params(bogus=1)
    copy = clone(est)
    assert type(copy) is type(est) and copy.get_params() == est.get_params() and copy is not est
    with pytest.raises(ValidationError, match="clone takes a privtd estimator; got int"):
        clone(3)  # type: ignore[arg-type]


# ------------------------------------------------ estimator_checks on a third party's estimator
class CoinFlip(Estimator):
    """A third party's estimator: majority vote over two labels, its ties broken by a seeded
    coin, each worker's weight a seeded draw; it declares no name (it is not registered)."""

    __privtd_tags__ = Tags(binary_only=True)

    def __init__(self, rng: int | None = None) -> None:
        self.rng = rng

    def _generator(self) -> np.random.Generator:
        return np.random.default_rng(self.rng)

    def _fit(self, answers, gold):
        if answers.n_labels > 2:
            raise ValidationError(f"CoinFlip is binary; these answers have {answers.n_labels}.")
        votes = np.zeros((answers.n_tasks, 2))
        np.add.at(votes, (answers.task, answers.value), 1.0)
        gen = self._generator()
        coin = (gen.random(answers.n_tasks) < 0.5).astype(np.int64)
        truth = np.where(votes[:, 0] == votes[:, 1], coin, votes.argmax(axis=1))
        if gold is not None:
            truth[gold.index] = gold.value
        proba = np.zeros((answers.n_tasks, answers.n_labels))
        proba[np.arange(answers.n_tasks), truth] = 1.0
        self._set_results(answers, truth, proba=proba, weight=gen.random(answers.n_workers))


@parametrize_with_checks([CoinFlip(rng=0)])
def test_a_third_party_estimator_passes(estimator, check):
    check(estimator)


def test_checks_follow_the_tags_and_are_named():
    names = [c.__name__ for c in estimator_checks.estimator_checks(CoinFlip())]
    assert "check_binary_only[categorical]" in names
    assert "check_warm_start[categorical]" in names
    assert not any("[numeric]" in n for n in names)  # the class takes labels only
    both = [c.__name__ for c in estimator_checks.estimator_checks(make_estimator("crh"))]
    assert "check_one_task[numeric]" in both and "check_one_task[categorical]" in both
    assert estimator_checks.estimator_id(CoinFlip()) == "CoinFlip"
    told = make_estimator("aware-ds", mechanism=MECHANISMS["two-layer"](a=0.05, b=0.2))
    assert estimator_checks.estimator_id(told) == "aware-ds@two-layer"
    with pytest.raises(ValidationError, match="takes a privtd.inference.Estimator instance"):
        list(estimator_checks.estimator_checks(CoinFlip))  # type: ignore[arg-type]


class Untagged(CoinFlip):
    """Refuses three labels, but its tags do not say binary_only (the parent's are replaced)."""

    __privtd_tags__ = Tags()


class StoresUnderAnotherName(CoinFlip):
    def __init__(self, seed: int | None = None) -> None:
        self.rng = seed


class IgnoresItsSeed(CoinFlip):
    def _generator(self) -> np.random.Generator:
        return np.random.default_rng()


class ForgetsGold(CoinFlip):
    def _fit(self, answers, gold):
        super()._fit(answers, None)


@pytest.mark.parametrize(
    "estimator, failing",
    [
        (Untagged(rng=0), "check_binary_only"),
        (StoresUnderAnotherName(seed=0), "check_params_round_trip"),
        (IgnoresItsSeed(rng=0), "check_same_seed_same_output"),
        (ForgetsGold(rng=0), "check_gold_is_fixed"),
    ],
)
def test_a_broken_estimator_fails_the_check_for_what_it_breaks(estimator, failing):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(AssertionError, match=rf"^{failing}\[categorical\] failed for "):
            check_estimator(estimator)


def test_check_estimator_passes_a_registered_estimator():
    check_estimator(make_estimator("mv"))


def test_the_clis_aware_forms_model_randomized_response():
    # infer's note for a plain method under randomized response names its aware form
    # (privtd.cli.infer.AWARE_FORM): each form's tags must say it models those mechanisms.
    from privtd.cli.infer import AWARE_FORM, RANDOMIZED_RESPONSE

    for plain, form in AWARE_FORM.items():
        assert method_tags(METHODS[form], form).mechanisms == RANDOMIZED_RESPONSE, form
        assert not method_tags(METHODS[plain], plain).aware


def test_the_aware_default_imports_only_the_estimators_before_it():
    # infer --mechanism one-layer looks up its default without importing every estimator.
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import json, sys\n"
        "from privtd.inference import aware_method\n"
        "from privtd.mechanisms import OneLayerRR\n"
        "print(aware_method(OneLayerRR(f=0.1, n_labels=2)))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('privtd.inference'))))"
    )
    src = str(Path(__file__).resolve().parent.parent / "src")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
    ).stdout.splitlines()
    assert out[0] == "aware-ds"
    loaded = set(json.loads(out[1]))
    assert "privtd.inference.aware_dawid_skene" in loaded
    assert not loaded & {"privtd.inference.glad", "privtd.inference.minimax_entropy"}
    assert inference.aware_method(MECHANISMS["laplace"]) is None  # none is tagged for it
