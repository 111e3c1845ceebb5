"""Write examples/toloka_results.tsv: a small synthetic Toloka results export (cats and dogs).

40 images, 7 Tolokers of known accuracy, 5 answers per image, 6 control tasks with a GOLDEN
answer, a few REJECTED and SKIPPED assignments, as a pool's "Download results" gives them
(docs/formats.md#toloka). Run from the repository root: python examples/make_toloka_results.py
"""

from __future__ import annotations

import numpy as np

rng = np.random.default_rng(0)
N_TASKS, PER_TASK = 40, 5
accuracy = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.55])
workers = [f"{rng.integers(16**14, 16**15):015x}" for _ in accuracy]
labels = np.array(["cat", "dog"])
truth = rng.integers(0, 2, N_TASKS)
golden = set(rng.choice(N_TASKS, 6, replace=False).tolist())

columns = [
    "INPUT:image",
    "OUTPUT:result",
    "GOLDEN:result",
    "HINT:text",
    "ASSIGNMENT:link",
    "ASSIGNMENT:task_id",
    "ASSIGNMENT:assignment_id",
    "ASSIGNMENT:worker_id",
    "ASSIGNMENT:status",
    "ASSIGNMENT:started",
]
lines = ["\t".join(columns)]
for t in range(N_TASKS):
    task_id = f"00009a1b2c--{0x6420A000 + t:08x}"
    for w in rng.choice(len(accuracy), PER_TASK, replace=False):
        correct = rng.random() < accuracy[w]
        answer = labels[truth[t] if correct else 1 - truth[t]]
        status = "APPROVED"
        if w == 6 and rng.random() < 0.3:
            status = "REJECTED"
        elif rng.random() < 0.04:
            status, answer = "SKIPPED", ""
        assignment = f"00009a1b2c--{rng.integers(16**8, 16**9):09x}"
        lines.append(
            "\t".join(
                [
                    f"https://example.com/pets/{t:03d}.jpg",
                    answer,
                    labels[truth[t]] if t in golden else "",
                    "",
                    f"https://platform.toloka.ai/task/1122334/{assignment}",
                    task_id,
                    assignment,
                    workers[w],
                    status,
                    f"2024-02-1{t % 9}T1{w}:0{t % 10}:31.204",
                ]
            )
        )
with open("examples/toloka_results.tsv", "w", encoding="utf-8", newline="") as handle:
    handle.write("\n".join(lines) + "\n")
truth_lines = ["task,truth"] + [
    f"00009a1b2c--{0x6420A000 + t:08x},{labels[truth[t]]}" for t in range(N_TASKS)
]
with open("examples/toloka_truth.csv", "w", encoding="utf-8", newline="") as handle:
    handle.write("\n".join(truth_lines) + "\n")
