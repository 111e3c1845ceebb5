"""The bundled real datasets: their catalogue, loading and export (re-exported by
:mod:`privtd.datasets`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from ..answers import Answers
from ..errors import ValidationError

__all__ = ["Dataset", "DATASETS", "load", "list_datasets", "export"]


@dataclass(frozen=True)
class _Spec:
    kind: Literal["categorical", "numeric"]
    description: str
    has_duplicates: bool = False


DATASETS: dict[str, _Spec] = {
    "duchenne": _Spec(
        "categorical",
        "Duchenne smile (Whitehill et al. 2009): binary, 64 workers, 2,134 tasks, 159 expert "
        "truths; the two-layer paper's Table 3 data",
        has_duplicates=True,
    ),
    "web": _Spec(
        "categorical", "Web search relevance (Zhou et al. 2012): 5 grades, 177 workers, 2,665 tasks"
    ),
    "adult_content": _Spec(
        "categorical",
        "AdultContent (Ipeirotis et al. 2010): 4 classes, 825 workers, 11,040 tasks, very sparse",
        has_duplicates=True,
    ),
    "sentiment": _Spec(
        "categorical",
        "Sentiment (Zheng et al. 2017 benchmark D_Product): binary, 85 workers, 1,000 tasks",
    ),
    "dog": _Spec(
        "categorical",
        "Dog breeds (Zheng et al. 2017 benchmark S_Dog): 4 classes, 109 workers, 807 tasks",
    ),
    "emotion": _Spec(
        "numeric",
        "Emotion scores (Zheng et al. 2017 benchmark F201): numeric in [-100, 100], "
        "38 workers, 700 tasks",
    ),
    "population": _Spec(
        "numeric",
        "City populations (Pasternack & Roth 2010, filtered): numeric, 2,415 sources, "
        "1,172 objects",
    ),
}


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: coded answers, truths indexed by task id, and where it comes from."""

    name: str
    answers: Answers
    truth: pd.Series
    description: str
    source: str

    def __iter__(self) -> Any:  # lets ``answers, truth = load(...)`` work
        return iter((self.answers, self.truth))


def list_datasets() -> list[str]:
    return sorted(DATASETS)


def _folder(name: str) -> Path:
    if name not in DATASETS:
        raise ValidationError(
            f"Unknown dataset {name!r}. Choose one of {', '.join(list_datasets())}."
        )
    return Path(str(resources.files(__package__) / "data" / name))


def load(name: str, *, on_duplicate: str = "first") -> Dataset:
    """Load a bundled dataset by name.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS` (``privtd datasets list``).
    on_duplicate : str
        For datasets whose source repeats (worker, task) pairs (duchenne, adult_content): how to
        merge them (see :meth:`Answers.from_frame`). Default ``"first"``, the worker's first answer.
        The merge is recorded in ``answers.notes``.

    Returns
    -------
    Dataset
        ``answers`` and ``truth`` (a Series indexed by task id, restricted to tasks that have
        answers; truth rows for tasks nobody answered are left out and counted in the notes).
    """
    spec = DATASETS.get(name)
    folder = _folder(name)
    assert spec is not None
    frame = pd.read_csv(folder / "answers.csv.gz", dtype={"worker": str, "task": str})
    answers = Answers.from_frame(frame, kind=spec.kind, on_duplicate=on_duplicate)  # type: ignore[arg-type]
    truth_frame = pd.read_csv(folder / "truth.csv.gz", dtype={"task": str})
    truth = truth_frame.set_index("task")["truth"]
    if spec.kind == "categorical":
        truth = truth.astype(frame["answer"].dtype)
    answered = truth.index.isin(answers.tasks)
    if not answered.all():
        answers = Answers(
            answers.task,
            answers.worker,
            answers.value,
            answers.tasks,
            answers.workers,
            answers.labels,
            answers.value_range,
            answers.notes
            + (
                f"{int((~answered).sum())} truth row(s) name tasks with no answers; "
                "left out of truth",
            ),
        )
    truth = truth[answered].rename("truth")
    source = (folder / "SOURCE.md").read_text(encoding="utf-8")
    return Dataset(name, answers, truth, spec.description, source)


def export(name: str, directory: str | Path) -> list[Path]:
    """Copy a dataset's raw files (answers, truth, SOURCE.md) into ``directory``, uncompressed."""
    import gzip

    folder = _folder(name)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem in ("answers.csv", "truth.csv"):
        target = out / stem
        with gzip.open(folder / f"{stem}.gz", "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        written.append(target)
    shutil.copyfile(folder / "SOURCE.md", out / "SOURCE.md")
    written.append(out / "SOURCE.md")
    return written
