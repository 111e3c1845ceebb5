"""``privtd perturb``, ``epsilon``, ``audit`` and ``attack``: the local mechanisms."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import NotNumericError, ValidationError
from ._common import (
    MECHANISM,
    ON_DUPLICATE,
    _atomic_csv,
    _check_mechanism_keys,
    _echo_note,
    _mechanism_keys,
    _mechanism_params,
    _one_stdout,
    _parse_params,
    _read_answers,
    _shown,
    _warn_label_set,
    _write_output,
    answer_source,
    mechanism_params,
)
from ._names import MECHANISM_NAMES


@click.command()
@click.argument("answers", type=click.Path(dir_okay=False))
@MECHANISM
@click.option(
    "--epsilon",
    "-e",
    type=float,
    help="Target per-answer epsilon; the mechanism is calibrated to it.",
)
@mechanism_params("e.g. -p a=0.1; or -p f=0.3 without --epsilon")
@click.option(
    "--seed",
    type=int,
    help="Integer seed: a reproducible simulation from privtd's fast keyed generator (not "
    "cryptographic). Without it: a real release, drawn from the OS cryptographic generator "
    "(numeric noise by OpenDP's exact samplers: pip install 'privtd[dp]').",
)
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV to write: task,worker,answer (perturbed), and gold (unperturbed) when the input "
    "has golden tasks; '-': standard output.",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    help="JSON to write: mechanism, parameters, label set, the marginal guarantee and every "
    "worker's figures, one answer given its others and the whole release ('-': standard "
    "output); the median and largest worker totals are printed either way. `privtd infer "
    "--mechanism-report` reads it.",
)
@click.option(
    "--clip",
    metavar="LOW,HIGH",
    help="Numeric mechanisms: clip the answers to [LOW, HIGH] before perturbing (the count "
    "clipped is printed); LOW and HIGH are then the mechanism's declared range (its low and "
    "high), which its sensitivity and guarantee rest on. Without it an answer outside the "
    "range is an error.",
)
@click.option(
    "--allow-float-leak",
    is_flag=True,
    help="mf only: make a real release (no --seed) although mf's floating-point rows can rule "
    "out neighbouring answers whatever epsilon says (Mironov 2012; docs/privacy.md). Without "
    "it a real mf release is refused.",
)
@click.option(
    "--allow-uninformative",
    is_flag=True,
    help="Release even where the mechanism's answers carry no information about the truth "
    "(epsilon 0 for one-layer, binary-rr and krr-null; two-layer with a = b = (K-1)/K): its "
    "outputs are then uniform draws, whatever the answers. Without it such a setting is "
    "refused.",
)
@answer_source
@ON_DUPLICATE
def perturb(
    answers: str,
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    seed: int | None,
    output: str,
    report: str | None,
    clip: str | None,
    allow_float_leak: bool,
    allow_uninformative: bool,
    fmt: str,
    delimiter: str | None,
    task_col: str | None,
    worker_col: str | None,
    answer_col: str | None,
    keep_rejected: bool,
    on_duplicate: str,
) -> None:
    """Perturb ANSWERS as each worker would on their device.

    ANSWERS is a long table (CSV, TSV or Parquet: task, worker, answer; map other column names
    with --task-col, --worker-col, --answer-col) or a platform's export (docs/formats.md).

    Without --seed this is a real release: categorical mechanisms draw from the OS
    cryptographic generator (os.urandom), numeric ones (laplace, exp-gaussian) release points
    of a public grid with exact discrete Laplace or Gaussian noise from OpenDP, so no release
    rules out a neighbouring answer through floating point. With --seed it is a simulation of
    the same laws from a fast keyed generator: reproducible, not for real data. mf's noise is
    real-valued: its guarantee holds for real arithmetic only (docs/privacy.md), so a real mf
    release needs --allow-float-leak.

    Golden tasks (an export's, or a long table's gold column) are kept in the output's gold
    column, unperturbed: infer holds them fixed and evaluate --truth scores against them.
    Settings whose answers carry no information (epsilon 0) are refused unless
    --allow-uninformative.

    Numeric answers are perturbed within the mechanism's declared range (-p low=... -p
    high=...): --clip LOW,HIGH clips them into it first and declares it (docs/privacy.md,
    "Clipping numeric answers").
    """
    import numpy as np

    from ..mechanisms import (
        MECHANISMS,
        TwoLayerRR,
        format_release_figures,
        make_mechanism,
        release_figures,
        worker_totals,
    )

    if allow_float_leak and mechanism != "mf":
        raise ValidationError(
            f"--allow-float-leak applies to mf only; {mechanism} releases on a public grid."
        )
    _one_stdout(output=output, report=report)
    param_values = _parse_params(param)
    _check_mechanism_keys(mechanism, epsilon is not None, param_values)
    if allow_uninformative:
        if "allow_uninformative" not in _mechanism_keys(mechanism, epsilon is not None):
            raise ValidationError(
                f"--allow-uninformative applies to one-layer, two-layer, binary-rr and "
                f"krr-null; {mechanism} always needs an epsilon above 0. Drop it."
            )
        param_values["allow_uninformative"] = True
    for path in (output, report):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValidationError(f"The folder of {path!r} does not exist. Create it first.")
    kind = MECHANISMS[mechanism].kind
    bounds = _clip_bounds(clip, mechanism, kind, param_values) if clip is not None else None
    try:
        imported = _read_answers(
            answers,
            fmt,
            delimiter,
            task_col,
            worker_col,
            answer_col,
            keep_rejected,
            kind=kind,
            on_duplicate=on_duplicate,
        )
    except NotNumericError as exc:
        # The reader's advice (read them as labels) does not apply: the mechanism fixes the kind.
        labels = ", ".join(name for name, cls in MECHANISMS.items() if cls.kind == "categorical")
        raise ValidationError(
            f"{exc.found}. The {mechanism} mechanism perturbs numbers; for labels use one of "
            f"{labels}."
        ) from None
    data = imported.answers
    for note in data.notes:
        _echo_note(note)
    if imported.gold is not None:
        click.echo(
            f"privtd: note: kept the {len(imported.gold)} golden task(s) of {answers!r} in the "
            "output's gold column, unperturbed (the requester's known truths, no worker's "
            "answer); their answers are perturbed like any other. infer holds them fixed "
            "(--no-gold: not), evaluate --truth scores against them.",
            err=True,
        )
    _warn_label_set(data, answer_col)
    clipped: dict[str, Any] | None = None
    if bounds is not None:
        data, clipped = _clip(data, *bounds)
        param_values.update(low=bounds[0], high=bounds[1])
    elif kind == "numeric" and {"low", "high"} <= set(param_values):
        _check_in_range(data, param_values["low"], param_values["high"])
    params = _mechanism_params(mechanism, param_values, data.n_tasks)
    if kind == "categorical":
        params.setdefault("n_labels", data.n_labels)
    if allow_float_leak:
        params["allow_float_leak"] = True
    mech = make_mechanism(mechanism, epsilon, **params)
    if seed is None and allow_float_leak:
        click.echo(
            "privtd: warning: a real mf release: its guarantee holds for real arithmetic only "
            "and the floating-point leak (Mironov 2012) is not closed (docs/privacy.md).",
            err=True,
        )
    perturbed = mech.perturb(data, rng=seed)
    summary: dict[str, Any] = {
        "mechanism": mechanism,
        "parameters": mech.params(),
        "guarantee": {
            "epsilon": mech.guarantee.epsilon,
            "delta": mech.guarantee.delta,
            "unit": mech.guarantee.unit,
            "note": mech.guarantee.note,
            "covers": f"one {mech.unit} alone, the worker's other releases unseen (the "
            "paper's marginal); each worker's figures under its one draw are in 'workers'",
        },
        "seed": seed,
        # The whole label set, for `infer --mechanism-report`: a label no release drew is
        # still one the channel could have produced. JSON keeps ints ints and strings strings.
        "labels": None if data.labels is None else [_plain(v) for v in data.labels],
        "n_answers": data.n_answers,
        "n_output": perturbed.n_answers,
        "n_gold": 0 if imported.gold is None else len(imported.gold),
    }
    if clipped is not None:
        summary["clipped"] = clipped
    if perturbed.n_answers == data.n_answers:  # same cells: say how many changed
        summary["changed_fraction"] = float((perturbed.value != data.value).mean())
    # One private draw per worker, as perturb draws: each worker's total is its whole release.
    totals = worker_totals(data, mech)
    summary["workers"] = {
        str(w): {
            "n_released": int(r.n_released),
            "epsilon_answer_given_others": float(r.epsilon_answer_given_others),
            "epsilon_total": float(r.epsilon_total),
        }
        for w, r in totals.iterrows()
    }
    largest = int(totals["n_released"].max()) if len(totals) else 0
    summary["largest_release"] = release_figures(mech, largest)
    if isinstance(mech, TwoLayerRR) and seed is not None:
        # Only a simulation knows each f_u; report what it means per worker
        # (docs/algorithms.md#the-two-layer-caveat).
        cond = mech.conditional_epsilons(mech.flips_for(data, seed))
        summary["conditional_epsilon_quantiles"] = {
            q: float(np.quantile(cond, float(q))) for q in ("0.1", "0.5", "0.9", "1.0")
        }
    _atomic_csv(_with_gold_column(perturbed.to_frame(), imported.gold), output, index=False)
    if report:
        _write_output(report, json.dumps(_strict(summary), indent=2, default=str) + "\n")
    changed = (
        f"{summary['changed_fraction']:.1%} changed"
        if "changed_fraction" in summary
        else f"{perturbed.n_answers} output cells"
    )
    click.echo(
        f"{mechanism}: {mech.guarantee} (one {mech.unit} alone: the paper's marginal); "
        f"{data.n_answers} answers of {data.n_workers} workers, {changed} -> {_shown(output)}",
        err=True,
    )
    if clipped is not None:
        click.echo(_clip_line(clipped, data.n_answers, mech), err=True)
    if len(totals):
        click.echo(_totals_line(totals, mech.unit, report), err=True)
    click.echo(f"the largest release ({largest} {mech.unit}s of one worker, one draw):", err=True)
    for line in format_release_figures(mech, largest)[1:]:
        click.echo(line, err=True)


def _with_gold_column(table: Any, gold: Any) -> Any:
    """The perturbed answers with the input's golden truths beside them, unperturbed: column
    ``gold``, each golden task's truth on its rows and blank elsewhere, which ``privtd.io``
    reads back as the table's golden tasks. Integer truths stay integers through the blanks."""
    if gold is None:
        return table
    import pandas as pd

    column = table["task"].map(gold)
    if pd.api.types.is_integer_dtype(pd.Series(list(gold)).dtype):
        column = column.astype("Int64")
    return table.assign(gold=column)


def _totals_line(totals: Any, unit: str, report: str | None) -> str:
    """Each worker's total (its whole release under one draw) in one line: the median
    worker's and the largest, each with the answers behind it."""
    import numpy as np

    eps = totals["epsilon_total"].to_numpy(dtype=float)
    sizes = totals["n_released"].to_numpy()
    order = np.argsort(eps, kind="stable")
    mid, top = order[(len(order) - 1) // 2], order[-1]
    where = f"every worker's in {_shown(report)}" if report else "every worker's: --report FILE"
    return (
        f"per-worker epsilon totals (each worker's whole release, one draw), {len(eps):,} "
        f"workers: median {eps[mid]:.4g} ({sizes[mid]:,} {unit}s), largest {eps[top]:.4g} "
        f"({sizes[top]:,} {unit}s); {where}"
    )


def _clip_bounds(
    text: str, mechanism: str, kind: str, params: dict[str, Any]
) -> tuple[float, float]:
    """``--clip LOW,HIGH`` as the mechanism's range: numbers, ``LOW < HIGH``, integers for the
    mechanisms over integer scores, and no other range given with ``-p``."""
    from ..mechanisms import MECHANISMS
    from ..mechanisms.null_aware import ScoreDomain

    if kind != "numeric":
        raise ValidationError(
            f"--clip applies to numeric answers; the {mechanism} mechanism perturbs labels. "
            "Drop --clip."
        )
    parts = [p.strip() for p in text.split(",")]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise ValidationError(
            f"--clip takes LOW,HIGH, two numbers (e.g. 0,100). Got {text!r}."
        ) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValidationError(f"--clip needs finite LOW < HIGH. Got {text!r}.")
    if issubclass(MECHANISMS[mechanism], ScoreDomain):
        if not (low.is_integer() and high.is_integer()):
            raise ValidationError(
                f"The {mechanism} mechanism perturbs integer scores: --clip takes two integers. "
                f"Got {text!r}."
            )
        low, high = int(low), int(high)
    for name, bound in (("low", low), ("high", high)):
        if name in params and float(params[name]) != float(bound):
            raise ValidationError(
                f"-p {name}={params[name]} disagrees with --clip {text}: --clip declares the "
                f"mechanism's range. Drop -p {name}."
            )
    return low, high


def _clip(data: Any, low: float, high: float) -> tuple[Any, dict[str, Any]]:
    """The answers clipped to ``[low, high]`` and what was clipped: the worker-side step
    before the mechanism, so that every answer lies in the range its guarantee assumes."""
    import numpy as np

    value = np.asarray(data.value, dtype=np.float64)
    below, above = int((value < low).sum()), int((value > high).sum())
    if below or above:
        data = data.with_values(np.clip(value, low, high))
    return data, {"low": low, "high": high, "below": below, "above": above}


def _check_in_range(data: Any, low: Any, high: Any) -> None:
    """An answer outside the declared range is an error that names --clip, before the
    mechanism's own check (which cannot know the flag)."""
    import numpy as np

    value = np.asarray(data.value, dtype=np.float64)
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        return  # the mechanism's constructor says what is wrong with them
    out = (value < lo) | (value > hi)
    if out.any():
        raise ValidationError(
            f"{int(out.sum())} of {value.size} answer(s) fall outside the declared range "
            f"[{low}, {high}] (first: {value[out][0]:g}); the guarantee assumes that range. "
            f"Fix them, declare a wider range, or clip them into it with --clip {low},{high}."
        )


def _clip_line(clipped: dict[str, Any], n_answers: int, mech: Any) -> str:
    """How many answers --clip moved, and the bound the mechanism's guarantee now uses."""
    low, high = clipped["low"], clipped["high"]
    moved = clipped["below"] + clipped["above"]
    sensitivity = getattr(mech, "sensitivity", None)
    if sensitivity is not None:  # exp-gaussian: the range in whole grid steps
        bound = f"sensitivity {sensitivity:g} (high - low on the grid of step {mech.step:.6g})"
    elif mech.name == "laplace":
        bound = f"sensitivity high - low = {high - low:g}"
    else:  # krr-null, two-layer-null, mf: the score domain
        bound = f"the {mech.domain_size} scores {low}..{high}"
    return (
        f"clipped {moved:,} of {n_answers:,} answers to [{low:g}, {high:g}] ({clipped['below']:,} "
        f"below, {clipped['above']:,} above) before {mech.name}, whose guarantee uses {bound}"
    )


def _plain(value: Any) -> Any:
    """A label as JSON writes it faithfully: numpy scalars as Python ones."""
    return value.item() if hasattr(value, "item") else value


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float as the string ``"inf"`` (``"-inf"``, ``"nan"``):
    an infinite epsilon (a mechanism that gives answers away) stays readable, where Python's
    ``Infinity`` is not JSON and strict parsers reject the whole document."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@click.command("audit")
@MECHANISM
@click.option("--epsilon", "-e", type=float, help="Calibrate the mechanism to this epsilon.")
@mechanism_params()
@click.option(
    "--samples",
    "-n",
    type=int,
    help="Samples per neighbouring input: one-answer workers (default 1,000,000), or with "
    "--answers simulated workers (default 2,000,000 / K).",
)
@click.option(
    "--answers",
    "-k",
    type=click.IntRange(min=1),
    help="Worker level: audit one worker's K answers as one release under its one private "
    "draw, against one answer given the other K-1 (--differ 1) or the whole release.",
)
@click.option(
    "--differ",
    type=click.IntRange(min=1),
    help="With --answers: in how many of the K answers the neighbours differ (default: 1, then "
    "half of K, then all K, each audited).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sampling.")
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=float,
    help="Confidence of the lower bounds, simultaneous over outputs and, with --answers, over "
    "the audits run (each gets its share).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def audit_cmd(
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    samples: int | None,
    answers: int | None,
    differ: int | None,
    seed: int,
    confidence: float,
    as_json: bool,
) -> None:
    """Measure a mechanism's privacy loss on neighbouring inputs against its claim.

    Without --answers: one answer of one worker, the paper's per-answer figure (per-worker
    secrets marginalised). With --answers K: one worker's K answers released under one private
    draw, as perturb and the client release them, against the figures privtd prints for it.
    Exits 1 when a measured lower bound exceeds its claimed epsilon.
    """
    from ..audit import AuditResult, audit, audit_worker
    from ..mechanisms import make_mechanism

    if differ is not None and answers is None:
        raise ValidationError("--differ needs --answers K (the worker-level audit).")
    if differ is not None and answers is not None and differ > answers:
        raise ValidationError(
            f"--differ {differ} is more than --answers {answers}: the neighbours differ in at "
            "most all K answers."
        )
    params = _parse_params(param)
    _check_mechanism_keys(mechanism, epsilon is not None, params)
    n_tasks = answers or 1
    mech = make_mechanism(mechanism, epsilon, **_mechanism_params(mechanism, params, n_tasks))
    records = []
    results: list[tuple[AuditResult, str, int | None]] = []
    if answers is None:
        n = samples or 1_000_000
        result = audit(mech, samples=n, seed=seed, confidence=confidence)
        results.append((result, f"one {mech.unit} alone (the paper's marginal)", None))
    else:
        n = samples or max(100, 2_000_000 // answers)
        ds = [differ] if differ else sorted({1, max(1, answers // 2), answers})
        # The exit status says whether every audit holds: split the error over them
        # (Bonferroni), so a claim that holds fails with probability below 1 - confidence.
        each = 1 - (1 - confidence) / len(ds)
        for changed in ds:
            r = audit_worker(mech, answers, changed, samples=n, seed=seed, confidence=each)
            results.append((r, r.claim, changed))
    for result, claim, d in results:
        fields: dict[str, Any] = {"mechanism": mechanism}
        if d is not None:
            fields.update({"answers": answers, "differ": d})
        fields.update(
            {
                "claimed_epsilon": result.claimed_epsilon,
                "claim": claim,
                "lower_bound": result.lower_bound,
                "point_estimate": result.point_estimate,
                "samples": n,
                "confidence": result.confidence,
                "verdict": result.verdict,
            }
        )
        records.append(fields)
    if as_json:
        click.echo(json.dumps(_strict(records[0] if len(records) == 1 else records)))
    else:
        for i, fields in enumerate(records):
            if i:
                click.echo("")
            for key, value in fields.items():
                shown = f"{value:.6g}" if isinstance(value, float) else str(value)
                click.echo(f"{key:>16}: {shown}")
    if not all(result.holds for result, _, _ in results):
        sys.exit(1)


@click.command("attack")
@click.argument("perturbed", type=click.Path(dir_okay=False))
@click.option(
    "--original",
    required=True,
    type=click.Path(dir_okay=False),
    help="The original answers (only to score the attack; the attack never reads them).",
)
@click.option(
    "--mechanism",
    "-M",
    required=True,
    type=click.Choice(MECHANISM_NAMES),
    help="The mechanism that produced PERTURBED (reported beside the result).",
)
@click.option("--epsilon", "-e", type=float, help="Its per-answer epsilon.")
@mechanism_params()
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def attack_cmd(
    perturbed: str,
    original: str,
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    as_json: bool,
) -> None:
    """Try to recover workers' original answers from PERTURBED, as an untrusted requester would,
    and report the fraction recovered against chance."""
    import pandas as pd

    from ..answers import Answers
    from ..attack import attack
    from ..mechanisms import MECHANISMS, make_mechanism

    if MECHANISMS[mechanism].kind != "categorical":
        raise ValidationError(f"The attack covers categorical mechanisms; {mechanism!r} is not.")
    orig = Answers.from_path(original, kind="categorical")
    assert orig.labels is not None
    pert = Answers.from_path(perturbed, kind="categorical", labels=list(orig.labels))
    # Same cells in the same order: align the perturbed rows to the original ones.
    key = pd.MultiIndex.from_arrays([pert.tasks.take(pert.task), pert.workers.take(pert.worker)])
    want = pd.MultiIndex.from_arrays([orig.tasks.take(orig.task), orig.workers.take(orig.worker)])
    pos = key.get_indexer(want)
    if (pos < 0).any() or len(key) != len(want):
        raise ValidationError("PERTURBED and --original must hold the same (task, worker) cells.")
    aligned = orig.with_values(pert.value[pos])
    params = _parse_params(param)
    _check_mechanism_keys(mechanism, epsilon is not None, params)
    params.setdefault("n_labels", orig.n_labels)
    mech = make_mechanism(mechanism, epsilon, **params)
    result: dict[str, Any] = {**attack(orig, aligned).as_dict(), "claimed": str(mech.guarantee)}
    if as_json:
        click.echo(json.dumps(result))
        return
    for key_, value in result.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        click.echo(f"{key_:>16}: {shown}")


@click.command("epsilon")
@MECHANISM
@click.option(
    "--epsilon", "-e", type=float, help="Print the parameters that achieve this per-answer epsilon."
)
@mechanism_params("e.g. -p f=0.3 -p n_labels=4")
@click.option(
    "--answers",
    "-k",
    type=click.IntRange(min=1),
    help="A worker's release size (answers; cells for the NULL-aware mechanisms): also print "
    "one answer's epsilon given the worker's other K-1 and the whole release's, under one "
    "private draw. They differ from the marginal where a worker's answers share a draw "
    "(two-layer, two-layer-null, exp-gaussian).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def epsilon_cmd(
    mechanism: str,
    epsilon: float | None,
    param: tuple[str, ...],
    answers: int | None,
    as_json: bool,
) -> None:
    """Print a mechanism's guarantee, or with --epsilon the parameters that achieve it.

    The guarantee printed first is the paper's figure for one answer alone; with --answers K the
    figures for a worker who releases K answers follow, each with its unit.
    """
    from ..mechanisms import format_release_figures, make_mechanism, release_figures

    params = _parse_params(param)
    _check_mechanism_keys(mechanism, epsilon is not None, params)
    mech = make_mechanism(mechanism, epsilon, **_mechanism_params(mechanism, params, 1))
    if as_json:
        record: dict[str, Any] = {
            "mechanism": mechanism,
            "parameters": {
                k: (v if isinstance(v, (int, float, str, type(None))) else str(v))
                for k, v in mech.params().items()
            },
            "delta": mech.delta,
            "note": mech.guarantee.note,
        }
        record.update(
            release_figures(mech, answers)
            if answers
            else {"marginal": release_figures(mech, 1)["marginal"]}
        )
        click.echo(json.dumps(_strict(record), default=str))
        return
    shown = [
        f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in mech.params().items()
    ]
    click.echo(f"{mechanism}: {', '.join(shown)}")
    click.echo(f"guarantee: {mech.guarantee} (one {mech.unit} alone: the paper's marginal)")
    if mech.guarantee.note:
        click.echo(f"note: {mech.guarantee.note}")
    if answers:
        click.echo(f"a worker releasing {answers} {mech.unit}(s) under one draw:")
        for line in format_release_figures(mech, answers):
            click.echo(line)
    elif mech.answer_epsilon(2) != mech.epsilon:
        click.echo(
            f"a worker's {mech.unit}s share one private draw: pass --answers K for one {mech.unit} "
            "given the worker's other K-1 and for its whole release"
        )
