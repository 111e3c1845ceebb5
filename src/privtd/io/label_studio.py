"""Label Studio JSON exports (docs/formats.md#label-studio).

A list of tasks; each has an ``id``, its ``data`` and ``annotations`` (``completions`` in
exports older than Label Studio 1.0). An annotation has ``completed_by`` (a user id, or an
object with ``id`` and ``email``; task and user ids are read as text), ``was_cancelled``
(skipped), ``ground_truth`` and ``result``, a list of regions; a classification is a region
of ``type`` ``choices`` with ``value.choices``, a list of the chosen labels, and
``from_name``, the control tag's name.

The export is read one task at a time (:func:`iter_tasks`), so that memory holds the answers
read so far and one task's JSON, never the whole file's tree, and every field read is checked
for the type Label Studio writes: a wrong one is a one-line error that says where it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pandas as pd

from ..errors import SchemaError, ValidationError
from ._base import Imported, build, gold_from, pick_one

__all__ = ["read_label_studio"]

#: Characters read at a time; a task longer than this is read in doubling steps.
_CHUNK = 1 << 18
_BLANK = re.compile(r"[ \t\r\n]*")


def iter_tasks(path: str) -> Iterator[Any]:
    """Each element of the JSON list at ``path``, parsed one at a time.

    :class:`json.JSONDecoder.raw_decode` parses one element from a window of the file; a
    window that ends inside the element is doubled and parsed again, so a task of any length
    costs time linear in its length, and memory the window plus that one task's objects.

    Raises
    ------
    ValidationError
        When the file is missing, not UTF-8, not JSON, not a list, or nested deeper than
        Python's parser allows.
    """
    decoder = json.JSONDecoder()
    try:
        handle = open(path, encoding="utf-8-sig")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except IsADirectoryError:
        raise ValidationError(f"{path!r} is a directory. Pass a file.") from None
    with handle:
        text, pos, offset, eof = "", 0, 0, False

        def fail(why: str, at: int) -> ValidationError:
            return ValidationError(
                f"Cannot parse {path!r} as a Label Studio JSON export: {why} (character "
                f"{offset + at}). Export the project again from Label Studio as JSON."
            )

        def more(at_least: int) -> bool:
            """Append at least ``at_least`` characters (or the rest); False at the end."""
            nonlocal text, pos, offset, eof
            if pos:  # drop what has been parsed
                text, offset, pos = text[pos:], offset + pos, 0
            try:
                chunk = handle.read(max(at_least, _CHUNK))
            except UnicodeDecodeError as exc:
                raise ValidationError(
                    f"Cannot parse {path!r} as a Label Studio JSON export: it is not UTF-8 "
                    f"text ({exc.reason}). Export it again from Label Studio as JSON."
                ) from None
            eof = len(chunk) < max(at_least, _CHUNK)
            text += chunk
            return bool(chunk)

        def skip_space() -> str:
            """The next non-blank character ('' at the end), left unconsumed."""
            nonlocal pos
            while True:
                pos = _BLANK.match(text, pos).end()  # type: ignore[union-attr]  # always matches
                if pos < len(text) or not more(0):
                    return text[pos : pos + 1]

        if skip_space() != "[":
            raise SchemaError(
                f"{path!r} is not a Label Studio JSON export: expected a list of tasks, each "
                "with 'id' and 'annotations'."
            )
        pos += 1
        first = True
        while True:
            char = skip_space()
            if char == "]":
                pos += 1
                if skip_space():
                    raise fail("extra data after the list of tasks", pos)
                return
            if not first:
                if char != ",":
                    raise fail("expected ',' or ']' between tasks", pos)
                pos += 1
                skip_space()
            first = False
            while True:
                try:
                    item, end = decoder.raw_decode(text, pos)
                except json.JSONDecodeError as exc:
                    if eof:
                        raise fail(exc.msg, exc.pos) from None
                    more(len(text) - pos)  # the element may go on past the window
                    continue
                except RecursionError:
                    raise fail(
                        "JSON nested deeper than Python's parser allows (a Label Studio export "
                        "nests a few levels)",
                        pos,
                    ) from None
                if end == len(text) and not eof:  # a number cut by the window's end
                    more(0)
                    continue
                break
            pos = end
            yield item


def _shown(value: Any) -> str:
    """A value in a message: its JSON kind and the start of its text."""
    kind = {dict: "an object", list: "a list", str: "text", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
    text = repr(value)
    return f"{kind} ({text[:40]}{'...' if len(text) > 40 else ''})"


class _Checker:
    """Type checks with messages that say where in the export the wrong value is."""

    def __init__(self, path: str) -> None:
        self.path = path

    def wrong(self, where: str, field: str, expected: str, value: Any) -> SchemaError:
        return SchemaError(
            f"{self.path!r} is not a usable Label Studio export: {where} has {field} = "
            f"{_shown(value)}, where Label Studio writes {expected}. Fix that entry, or export "
            "the project again from Label Studio as JSON."
        )

    def id_text(self, where: str, field: str, value: Any) -> str:
        # Ids are text everywhere in privtd (a --gold CSV and the output CSV name the same
        # tasks and workers); a number or text is an id, anything else is not.
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return str(value)
        raise self.wrong(where, field, "a number or text", value)

    def flag(self, where: str, field: str, value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return bool(value)
        raise self.wrong(where, field, "true or false", value)

    def user(self, where: str, annotation: dict[str, Any]) -> str | None:
        """The annotator: ``completed_by``'s id, or its email, or the ``created_username`` some
        older exports carry."""
        who = annotation.get("completed_by")
        if isinstance(who, dict):
            if who.get("id") is not None:
                return self.id_text(where, "'completed_by.id'", who["id"])
            if who.get("email") is not None:
                return self.id_text(where, "'completed_by.email'", who["email"])
            who = None
        if who is not None:
            return self.id_text(where, "'completed_by'", who)
        name = annotation.get("created_username")
        return None if name is None else self.id_text(where, "'created_username'", name)


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

    Raises
    ------
    SchemaError
        When a field has a type Label Studio does not write (the message says which task,
        annotation and region).
    """
    if multiple not in ("error", "join"):
        raise ValidationError(f"multiple must be 'error' or 'join'. Got {multiple!r}.")
    check = _Checker(path)
    # One list per column, each repeated text kept once (``seen``): memory grows with the
    # answers, not with the export's size.
    tasks: list[str] = []
    workers: list[str | None] = []
    controls: list[str | None] = []
    labels: list[Any] = []
    counts: list[int] = []
    truths: list[bool] = []
    seen: dict[tuple[type, Any], Any] = {}

    def once(value: Any) -> Any:  # keyed by type too: the label True is not the label 1
        return seen.setdefault((type(value), value), value)

    n_cancelled = n_other = 0
    for number, item in enumerate(iter_tasks(path)):
        if not isinstance(item, dict):
            raise check.wrong(f"task {number}", "the task", "an object", item)
        annotations = item.get("annotations", item.get("completions"))
        if "id" not in item or annotations is None:
            missing = "id" if "id" not in item else "annotations"
            raise SchemaError(
                f"{path!r} is not a usable Label Studio export: task {number} lacks {missing!r}."
            )
        task_id = check.id_text(f"task {number}", "'id'", item["id"])
        where = f"task {number} (id {task_id!r})"
        if not isinstance(annotations, list):
            raise check.wrong(where, "'annotations'", "a list", annotations)
        for k, annotation in enumerate(annotations):
            at = f"{where}, annotation {k}"
            if not isinstance(annotation, dict):
                raise check.wrong(at, "the annotation", "an object", annotation)
            if check.flag(at, "'was_cancelled'", annotation.get("was_cancelled")):
                n_cancelled += 1
                continue
            user = check.user(at, annotation)
            user = once(user)
            truth = check.flag(at, "'ground_truth'", annotation.get("ground_truth"))
            result = annotation.get("result")
            if result is None:
                continue
            if not isinstance(result, list):
                raise check.wrong(at, "'result'", "a list of regions", result)
            for r, region in enumerate(result):
                if not isinstance(region, dict):
                    raise check.wrong(f"{at}, region {r}", "the region", "an object", region)
                if region.get("type") != "choices":
                    n_other += 1
                    continue
                value = region.get("value")
                value = {} if value is None else value
                if not isinstance(value, dict):
                    raise check.wrong(f"{at}, region {r}", "'value'", "an object", value)
                choices = value.get("choices")
                choices = [] if choices is None else choices
                if not isinstance(choices, list) or not all(
                    isinstance(c, (str, int, float)) for c in choices
                ):
                    raise check.wrong(
                        f"{at}, region {r}", "'value.choices'", "a list of labels", choices
                    )
                control = region.get("from_name")
                if control is not None and not isinstance(control, str):
                    raise check.wrong(
                        f"{at}, region {r}", "'from_name'", "the control's name", control
                    )
                # One choice is the common case: kept as given; a set is joined in order.
                label = (
                    choices[0]
                    if len(choices) == 1
                    else "|".join(sorted(map(str, choices)))
                    if choices
                    else None
                )
                tasks.append(task_id)
                workers.append(user)
                controls.append(once(control))
                labels.append(once(label))
                counts.append(len(choices))
                truths.append(truth)
    notes: list[str] = []
    if n_cancelled:
        notes.append(f"left out {n_cancelled} cancelled (skipped) annotation(s)")
    if n_other:
        notes.append(f"left out {n_other} result region(s) that are not choices")
    seen.clear()
    frame = pd.DataFrame(
        {
            "task": pd.Series(tasks, dtype=object),
            "worker": pd.Series(workers, dtype=object),
            "control": pd.Series(controls, dtype=object),
            "answer": pd.Series(labels, dtype=object),
            "count": pd.Series(counts, dtype="int64"),
            "truth": pd.Series(truths, dtype=bool),
        }
    )
    del tasks, workers, controls, labels, counts, truths
    controls_found = sorted({str(c) for c in frame["control"].unique()}) if len(frame) else []
    control = pick_one(controls_found, answer, "Choices control", "label-studio", "answer")
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
