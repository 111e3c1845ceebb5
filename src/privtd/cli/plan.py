"""``privtd plan``: what privacy costs, predicted before the answers are collected."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import click

from ..errors import ValidationError
from ._common import _atomic_csv, _parse_params, _read_answers

_MECHANISMS = ("one-layer", "two-layer", "binary-rr", "exp-gaussian", "laplace")


def _numbers(text: str | None, option: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValidationError(
            f"{option} takes numbers separated by commas. Got {text!r}."
        ) from None


def _target(text: str | None, numeric: bool) -> tuple[str, float] | None:
    if text is None:
        return None
    from ..plan import METRICS

    metric, _, value = text.partition("=")
    metric = metric.strip()
    choices = ("mae",) if numeric else METRICS
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if metric not in choices or not math.isfinite(number):
        raise ValidationError(
            f"--target takes METRIC=VALUE with METRIC one of {', '.join(choices)} (e.g. "
            f"{'mae=1.5' if numeric else 'balanced=0.8'}). Got {text!r}."
        )
    if numeric:
        raise ValidationError(
            "--target for numeric plans is not supported; compare MAEs with -r at several "
            "redundancies instead."
        )
    if not 0 < number <= 1:
        raise ValidationError(f"A {metric} target is a fraction in (0, 1]. Got {number:g}.")
    return metric, number


def _fmt(score: tuple[float, float, float]) -> str:
    mean, lo, hi = score
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


@click.command("plan")
@click.argument("pilot", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--kind",
    type=click.Choice(["categorical", "numeric"]),
    default="categorical",
    show_default=True,
    help="Answer type to plan for.",
)
@click.option("--labels", "-K", type=click.IntRange(min=2), help="Label count (without PILOT).")
@click.option(
    "--shares",
    metavar="S1,S2,...",
    help="Rough class shares, one per label (default uniform; with PILOT, replaces its fitted "
    "shares).",
)
@click.option(
    "--accuracy",
    metavar="P | R1,R2,...",
    help="Rough worker accuracy, or one recall per class (without PILOT; default 0.7).",
)
@click.option(
    "--spread",
    type=click.FloatRange(0, 1),
    default=None,
    help="Worker-to-worker spread: each worker's recall is the rough one plus U(-s, s) "
    "(default 0.1); numeric: each worker's noise is --noise times U(1 - s, 1 + s) (default 0.5).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Workers in the crowd (without PILOT; with one, its workers are the crowd).",
)
@click.option(
    "--tasks",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Tasks to collect: the intervals are for scoring this many.",
)
@click.option(
    "--mechanism",
    "-M",
    "mechanisms",
    multiple=True,
    type=click.Choice(_MECHANISMS),
    help="Mechanism(s) to plan, repeatable (default: one-layer, two-layer and, over two labels, "
    "binary-rr; numeric: exp-gaussian and laplace).",
)
@click.option(
    "--epsilon",
    "-e",
    "epsilons",
    multiple=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Per-answer epsilon as stated by the mechanism, repeatable to compare (default 1).",
)
@click.option(
    "--param",
    "-p",
    multiple=True,
    metavar="KEY=VALUE",
    help="Mechanism parameter, e.g. -p a=0.2 for two-layer (default: the smallest feasible a).",
)
@click.option(
    "--answers-per-task",
    "-r",
    "per_task",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Answers per task to plan for.",
)
@click.option(
    "--target",
    metavar="METRIC=VALUE",
    help="Also find the fewest answers per task whose predicted METRIC (accuracy, balanced, "
    "minority) reaches VALUE, e.g. balanced=0.8.",
)
@click.option(
    "--max-answers",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="The most answers per task --target searches.",
)
@click.option(
    "--pilot-mechanism",
    type=click.Choice(["one-layer", "two-layer", "binary-rr"]),
    help="How PILOT's answers were perturbed (leave out if they were not); its channel is "
    "taken out when fitting the crowd.",
)
@click.option("--pilot-epsilon", type=float, help="The epsilon PILOT was perturbed at.")
@click.option(
    "--pilot-truth",
    type=click.Path(dir_okay=False),
    help="CSV task,truth: the known truths of some PILOT tasks (golden tasks). They give the "
    "class shares and how much tasks differ in difficulty; without them the plan assumes all "
    "tasks alike and overestimates at high epsilon and many answers a task.",
)
@click.option(
    "--pilot-param", multiple=True, metavar="KEY=VALUE", help="PILOT's mechanism parameter."
)
@click.option("--range", "value_range", metavar="LOW,HIGH", help="Numeric: the answer range.")
@click.option(
    "--noise", type=click.FloatRange(min=0), help="Numeric: a worker's rough error (its SD)."
)
@click.option(
    "--replicates",
    type=click.IntRange(min=2),
    default=5,
    show_default=True,
    help="Simulated crowds per prediction.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Also write the table as CSV."
)
def plan_cmd(
    pilot: str | None,
    kind: str,
    labels: int | None,
    shares: str | None,
    accuracy: str | None,
    spread: float | None,
    workers: int,
    tasks: int,
    mechanisms: tuple[str, ...],
    epsilons: tuple[float, ...],
    param: tuple[str, ...],
    per_task: int,
    target: str | None,
    max_answers: int,
    pilot_mechanism: str | None,
    pilot_epsilon: float | None,
    pilot_truth: str | None,
    pilot_param: tuple[str, ...],
    value_range: str | None,
    noise: float | None,
    replicates: int,
    seed: int,
    output: str | None,
) -> None:
    """Predict how well the truths will come out before collecting them: accuracy, balanced
    accuracy (the mean per-class recall) and the rarest class's recall, each with a nominal 95%
    interval, for each mechanism and epsilon; MAE for numbers. Describe the crowd roughly
    (--labels, --shares, --accuracy) or give a small PILOT of answers (perturbed or not; name
    its mechanism with --pilot-mechanism; --pilot-truth for its golden tasks).

    privtd draws fresh crowds from that description, perturbs them with the mechanism and runs
    the method `privtd infer --mechanism` uses by default. Checked against measured runs
    (benchmarks/results/plan_validation.txt, docs/plan.md): balanced accuracy within 0.03 in
    45 of 48 synthetic cells; on real sets, from a pilot of a tenth of the tasks with their
    truths, within 0.03 in 45 of 72 cells and off by up to 0.06 at high epsilon with many
    answers a task (tasks of uneven difficulty: an upper bound there) and 0.16 under two-layer.
    Read the figures as a guide, not a promise.

    Two-layer's stated epsilon holds for one answer alone; the table prints what a worker with
    its answers really loses per answer and over its release, and the recommendation compares
    mechanisms on that figure.
    """
    from ..plan import (
        CATEGORICAL_MECHANISMS,
        NUMERIC_MECHANISMS,
        NumericCrowd,
        answers_needed,
        make_plan_mechanism,
        predict,
        predict_numeric,
        recommend,
    )

    numeric = kind == "numeric"
    goal = _target(target, numeric)
    eps_list = list(epsilons) or [1.0]
    params = _parse_params(param)
    if numeric:
        bounds = _numbers(value_range, "--range")
        if pilot is not None:
            raise ValidationError(
                "A numeric plan takes --range and --noise, not a pilot file. Estimate the "
                "workers' error from the pilot and pass --noise."
            )
        if bounds is None or len(bounds) != 2 or noise is None:
            raise ValidationError(
                "A numeric plan needs --range LOW,HIGH and --noise SD (a worker's rough error)."
            )
        names = list(mechanisms) or list(NUMERIC_MECHANISMS)
        wrong = [m for m in names if m not in NUMERIC_MECHANISMS]
        if wrong:
            raise ValidationError(
                f"{wrong[0]} perturbs labels; a numeric plan takes {', '.join(NUMERIC_MECHANISMS)}."
            )
        ncrowd = NumericCrowd.from_noise(
            bounds[0], bounds[1], noise, n_workers=workers,
            spread=0.5 if spread is None else spread, rng=seed,
        )  # fmt: skip
        preds = []
        for eps in eps_list:
            for name in names:
                extra = {"low": bounds[0], "high": bounds[1], **params}
                if name == "laplace":
                    extra = {
                        k: int(round(v)) if k in ("low", "high") else v for k, v in extra.items()
                    }
                mech = make_plan_mechanism(name, eps, **extra)
                preds.append(
                    predict_numeric(
                        ncrowd, mech, per_task, n_tasks=tasks, replicates=replicates, rng=seed
                    )
                )
        click.echo(
            f"plan: numeric answers in [{bounds[0]:g}, {bounds[1]:g}], worker error SD about "
            f"{noise:g}, {workers} workers, {tasks} tasks, {per_task} answers a task "
            f"({replicates} simulated crowds each)"
        )
        click.echo(f"{'mechanism':<13} {'eps':>5}  {'MAE [95%]':<22} {'median MAE':>10}  method")
        for p in preds:
            click.echo(
                f"{p.mechanism:<13} {p.epsilon:>5g}  {_fmt(p.scores['mae']):<22} "
                f"{p.baseline:>10.3f}  {p.method}"
            )
            if p.scores["mae"][0] > p.baseline:
                click.echo(
                    f"  {p.mechanism} at epsilon {p.epsilon:g}: the noise outweighs the answers; "
                    "the median of all answers does better"
                )
        _maybe_write(output, preds)
        return

    crowd = _crowd(
        pilot, labels, shares, accuracy, spread, workers, seed,
        pilot_mechanism, pilot_epsilon, pilot_param, pilot_truth,
    )  # fmt: skip
    k = crowd.n_labels
    names = list(mechanisms) or [m for m in CATEGORICAL_MECHANISMS if m != "binary-rr" or k == 2]
    wrong = [m for m in names if m in NUMERIC_MECHANISMS]
    if wrong:
        raise ValidationError(f"{wrong[0]} perturbs numbers; pass --kind numeric.")
    if "binary-rr" in names and k != 2:
        raise ValidationError(f"binary-rr is for two labels; this crowd has {k}. Use one-layer.")
    preds = []
    for eps in eps_list:
        done: dict[str, Any] = {}
        for name in names:
            mech = make_plan_mechanism(name, eps, k, **params)
            if name == "binary-rr" and "one-layer" in done:
                # Over two labels binary RR is one-layer's channel: the same prediction.
                done[name] = replace(done["one-layer"], mechanism=name)
            else:
                done[name] = predict(
                    crowd, mech, per_task, n_tasks=tasks, replicates=replicates, rng=seed
                )
            preds.append(done[name])
    shown = ", ".join(f"{lab}: {s:.2f}" for lab, s in zip(crowd.labels, crowd.shares, strict=True))
    source = f"pilot {pilot}" if pilot else "rough figures"
    click.echo(
        f"plan: {k} labels (shares {shown}), {crowd.n_workers} workers ({source}), {tasks} tasks, "
        f"{per_task} answers a task ({replicates} simulated crowds each)"
    )
    click.echo(
        f"baseline: labelling every task the majority class gives accuracy "
        f"{float(crowd.shares.max()):.3f}, balanced accuracy {1 / k:.3f}"
    )
    click.echo(
        f"{'mechanism':<10} {'eps':>5}  {'accuracy [95%]':<22} {'balanced [95%]':<22} "
        f"{'minority recall [95%]':<22} {'eps/answer':>10} {'eps/worker':>10}"
    )
    for p in preds:
        click.echo(
            f"{p.mechanism:<10} {p.epsilon:>5g}  {_fmt(p.scores['accuracy']):<22} "
            f"{_fmt(p.scores['balanced']):<22} {_fmt(p.scores['minority']):<22} "
            f"{p.answer_epsilon:>10.3g} {p.release_epsilon:>10.3g}"
        )
    k_worker = math.ceil(preds[0].answers_per_worker)
    click.echo(
        f"eps/answer: one answer's loss given the worker's other answers; eps/worker: the whole "
        f"release; both for a worker giving {k_worker} answers. Method: {preds[0].method} "
        "(privtd infer's default)."
    )
    if any(p.mechanism == "two-layer" and p.params.get("a", 0) > 0 for p in preds):
        used = ", ".join(
            f"{p.params['a']:.3g} at epsilon {p.epsilon:g}"
            for p in preds
            if p.mechanism == "two-layer"
        )
        how = (
            "as given (-p a=...)" if "a" in params else "the smallest feasible; -p a=... to choose"
        )
        click.echo(f"two-layer over {k} labels used a = {used} ({how}).")
    if "binary-rr" in names and "one-layer" in names:
        click.echo(
            "binary-rr over two labels is one-layer's channel (P4's per-attribute unit): the "
            "same figures."
        )
    click.echo(
        "recommended (compared at each epsilon on the true figures, per answer and per worker):"
    )
    click.echo(recommend(preds))
    if goal is not None:
        metric, value = goal
        for eps in eps_list:
            for name in names:
                if name == "binary-rr" and "one-layer" in names:
                    continue  # the same channel as one-layer, searched above
                mech = make_plan_mechanism(name, eps, k, **params)
                needed, at = answers_needed(
                    crowd, mech, metric, value, max_per_task=max_answers, n_tasks=tasks,
                    replicates=min(replicates, 3), rng=seed,
                )  # fmt: skip
                if needed is None:
                    click.echo(
                        f"target {metric} >= {value:g}: {name} at epsilon {eps:g} does not reach "
                        f"it within {at.per_task} answers a task ({_fmt(at.scores[metric])})"
                    )
                else:
                    click.echo(
                        f"target {metric} >= {value:g}: {name} at epsilon {eps:g} needs {needed} "
                        f"answer{'s' if needed > 1 else ''} a task ({_fmt(at.scores[metric])}); "
                        f"a worker then gives {math.ceil(at.answers_per_worker)} answers: "
                        f"{at.answer_epsilon:.3g} per answer, {at.release_epsilon:.3g} in all"
                    )
    _maybe_write(output, preds)


def _crowd(
    pilot: str | None,
    labels: int | None,
    shares: str | None,
    accuracy: str | None,
    spread: float | None,
    workers: int,
    seed: int,
    pilot_mechanism: str | None,
    pilot_epsilon: float | None,
    pilot_param: tuple[str, ...],
    pilot_truth: str | None,
) -> Any:
    from ..plan import Crowd, _check_shares

    share = _numbers(shares, "--shares")
    if pilot is None:
        if pilot_mechanism or pilot_epsilon is not None or pilot_param or pilot_truth:
            raise ValidationError(
                "--pilot-mechanism, --pilot-epsilon, --pilot-param and --pilot-truth describe a "
                "PILOT file; give one, or drop them."
            )
        k = labels or (len(share) if share else None)
        acc = _numbers(accuracy, "--accuracy")
        if k is None and acc is not None and len(acc) > 1:
            k = len(acc)
        if k is None:
            raise ValidationError(
                "Describe the crowd: --labels K (with --shares and --accuracy), or give a PILOT "
                "file of answers."
            )
        return Crowd.from_accuracy(
            k, (acc[0] if acc and len(acc) == 1 else acc) or 0.7, share,
            n_workers=workers, spread=0.1 if spread is None else spread, rng=seed,
        )  # fmt: skip
    if accuracy is not None or labels is not None or spread is not None:
        raise ValidationError(
            "With a PILOT file the crowd is fitted from it: drop --accuracy, --labels and --spread."
        )
    imported = _read_answers(pilot, "auto", None, None, None, None, False)
    answers = imported.answers
    mech = None
    if pilot_mechanism is not None:
        from ..mechanisms import make_mechanism

        extra = _parse_params(pilot_param, "--pilot-param")
        extra.setdefault("n_labels", answers.n_labels)
        if pilot_epsilon is None and not {"f", "b"} & set(extra):
            raise ValidationError(
                "--pilot-mechanism needs --pilot-epsilon (or its parameters, --pilot-param)."
            )
        mech = make_mechanism(pilot_mechanism, pilot_epsilon, **extra)
    elif pilot_epsilon is not None or pilot_param:
        raise ValidationError(
            "--pilot-epsilon needs --pilot-mechanism: name how PILOT was perturbed."
        )
    truth = None
    if pilot_truth is not None:
        from ._common import _read_truth_csv

        truth = _read_truth_csv(pilot_truth)
        truth = truth[truth.index.isin(answers.tasks)]
        if truth.empty:
            raise ValidationError(
                f"--pilot-truth {pilot_truth!r} names none of PILOT's tasks. Give the truths of "
                "tasks in the pilot."
            )
        labels_known = set(answers.labels) if answers.labels is not None else set()
        unknown = sorted({str(v) for v in truth if v not in labels_known})
        if unknown:
            raise ValidationError(
                f"--pilot-truth has label(s) {unknown[:3]} that no pilot answer gives. Check the "
                "file, or give a pilot whose answers use every label."
            )
    crowd = Crowd.from_pilot(answers, mech, truth)
    if share is not None:
        crowd = replace(crowd, shares=_check_shares(share, crowd.n_labels))
    return crowd


def _maybe_write(output: str | None, preds: list[Any]) -> None:
    if output is None:
        return
    import pandas as pd

    _atomic_csv(pd.DataFrame([p.row() for p in preds]), output, index=False)
