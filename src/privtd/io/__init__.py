"""Reading answers from files: privtd's long table and the crowdsourcing platforms' exports.

Platform exports are converted here, at the edge, and nowhere else: every reader returns an
:class:`Imported`, the :class:`~privtd.Answers` in privtd's one schema plus the golden tasks
the export carries. The formats, the columns read and what is left out are in docs/formats.md.

>>> from privtd import io
>>> data = io.read("toloka_results.tsv")                      # doctest: +SKIP
>>> DawidSkene().fit(data.answers, gold=data.gold)              # doctest: +SKIP
"""

from ._base import FORMAT_LABELS, Imported
from ._read import FORMATS, detect, read, read_long, sniff_delimiter
from .appen import read_appen
from .label_studio import read_label_studio
from .mturk import read_mturk
from .toloka import read_toloka

__all__ = [
    "FORMATS",
    "FORMAT_LABELS",
    "Imported",
    "detect",
    "read",
    "read_appen",
    "read_label_studio",
    "read_long",
    "read_mturk",
    "read_toloka",
    "sniff_delimiter",
]
