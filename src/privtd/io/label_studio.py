"""Label Studio JSON exports (docs/formats.md#label-studio).

A list of tasks; each has an ``id``, its ``data`` and ``annotations`` (``completions`` in
exports older than Label Studio 1.0). An annotation has ``completed_by`` (a user id, or an
object with ``id`` and ``email``; task and user ids are read as text), ``was_cancelled``
(skipped), ``ground_truth`` and ``result``, a list of regions; a classification is a region
of ``type`` ``choices`` with ``value.choices``, a list of the chosen labels, and
``from_name``, the control tag's name.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ..errors import SchemaError, ValidationError
from ._base import Imported, build, gold_from, pick_one

__all__ = ["read_label_studio"]


def _user(annotation: dict[str, Any]) -> str | None:
    """The annotator as text (ids are text everywhere in privtd, so that a --gold CSV and the
    output CSV name the same tasks and workers): ``completed_by``'s id, or its email, or the
    ``created_username`` some older exports carry."""
    who = annotation.get("completed_by")
    if isinstance(who, dict):
        who = who.get("id", who.get("email"))
    if who is None:
        who = annotation.get("created_username")
    return None if who is None else str(who)


def read_label_studio(
    path: str,
    *,
    answer: str | None = None,
    multiple: str = "error",
    **kwargs: Any,
) -> Imported:
    """Read a Label Studio JSON export of a classification project.

    Parameters
    ----------
    path : str
        The ``JSON`` export (not ``JSON_MIN``, which drops the annotator).
    answer : str, optional
        The ``Choices`` control's name (``from_name``) when the project has several.
    multiple : {"error", "join"}
        A region with several choices (``choice="multiple"``): an error, or one label made of
        the sorted choices joined by ``|``.
    **kwargs
        Passed to :meth:`privtd.Answers.from_frame`.

    Returns
    -------
    Imported
        ``.answers`` from the annotations that are neither cancelled nor ground truth, and
        ``.gold`` from the ground-truth annotations.
    """
    if multiple not in ("error", "join"):
        raise ValidationError(f"multiple must be 'error' or 'join'. Got {multiple!r}.")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            tasks = json.load(handle)
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(
            f"Cannot parse {path!r} as a Label Studio JSON export: {exc}."
        ) from None
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise SchemaError(
            f"{path!r} is not a Label Studio JSON export: expected a list of tasks, each with "
            "'id' and 'annotations'."
        )
    # task, worker, control, label, number of choices, ground truth
    rows: list[tuple[Any, Any, str, Any, int, bool]] = []
    n_cancelled = n_other = 0
    for number, item in enumerate(tasks):
        annotations = item.get("annotations", item.get("completions"))
        if "id" not in item or annotations is None:
            missing = "id" if "id" not in item else "annotations"
            raise SchemaError(
                f"{path!r} is not a usable Label Studio export: task {number} lacks {missing!r}."
            )
        task_id = str(item["id"])
        for annotation in annotations:
            if annotation.get("was_cancelled"):
                n_cancelled += 1
                continue
            user = _user(annotation)
            truth = bool(annotation.get("ground_truth"))
            for region in annotation.get("result") or []:
                if region.get("type") != "choices":
                    n_other += 1
                    continue
                choices = (region.get("value") or {}).get("choices") or []
                # One choice is the common case: kept as given; a set is joined in order.
                label = (
                    choices[0]
                    if len(choices) == 1
                    else "|".join(sorted(map(str, choices)))
                    if choices
                    else None
                )
                rows.append((task_id, user, region.get("from_name"), label, len(choices), truth))
    notes: list[str] = []
    if n_cancelled:
        notes.append(f"left out {n_cancelled} cancelled (skipped) annotation(s)")
    if n_other:
        notes.append(f"left out {n_other} result region(s) that are not choices")
    frame = pd.DataFrame(rows, columns=["task", "worker", "control", "answer", "count", "truth"])
    controls = sorted({str(c) for c in frame["control"].unique()}) if len(frame) else []
    control = pick_one(
        controls, answer, "Choices control", "label-studio", "--answer-col (Python: answer=)"
    )
    frame = frame[frame["control"].astype(str) == control]
    several = frame["count"].to_numpy() > 1
    if several.any() and multiple == "error":
        row = int(several.argmax())
        task_id, picked = frame["task"].iloc[row], frame["answer"].iloc[row].split("|")
        raise ValidationError(
            f"Label Studio task {str(task_id)!r} has several choices {picked} in one annotation "
            f"of {control!r}; privtd reads one label per answer. Read each set of choices as one "
            "label with privtd.io.read_label_studio(path, multiple='join')."
        )
    label = frame["answer"]
    empty = label.isna() | frame["worker"].isna()
    if empty.any():
        notes.append(f"left out {int(empty.sum())} annotation(s) with no choice or no annotator")
    frame = frame[~empty.to_numpy()]
    is_truth = frame["truth"].to_numpy(dtype=bool)
    gold = gold_from(frame["task"][is_truth], frame["answer"][is_truth], "label-studio")
    if is_truth.any():
        notes.append(
            f"read {int(is_truth.sum())} ground-truth annotation(s) as gold, not as answers"
        )
    long = pd.DataFrame(
        {
            "task": frame["task"][~is_truth].to_numpy(),
            "worker": frame["worker"][~is_truth].to_numpy(),
            "answer": frame["answer"][~is_truth].to_numpy(),
        }
    )
    return build(long, gold, "label-studio", notes, path, kwargs)
