"""Hostile and huge platform exports (privtd.io): every bad shape gets a one-line error that says
where it is, memory stays within a small multiple of the file, and wide files are read whole.

benchmarks/attacks/attack_importers.py runs the same attacks at full size (peak memory and time
at several sizes).
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from cli_runner import run_cli as run
from privtd import io
from privtd.errors import SchemaError, ValidationError
from privtd.io import label_studio


def annotation(worker, choice, **extra):
    return {
        "id": 1,
        "completed_by": worker,
        "result": [
            {
                "id": "r",
                "from_name": "sentiment",
                "to_name": "text",
                "type": "choices",
                "value": {"choices": [choice]},
            }
        ],
        "was_cancelled": False,
        "ground_truth": False,
        **extra,
    }


def task(number, text="a review", n=3):
    return {
        "id": number,
        "data": {"text": text},
        "annotations": [annotation(w, ("pos", "neg")[(number + w) % 2]) for w in range(n)],
    }


def write_json(path, value):
    path.write_text(json.dumps(value))
    return str(path)


def edited(change):
    item = task(1)
    change(item)
    return [item]


def set_at(*keys_and_value):
    *keys, value = keys_and_value

    def change(item):
        node = item
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


REGION = ("annotations", 0, "result", 0)

#: name -> (the export's JSON text, a word the error must name)
HOSTILE = {
    "deep_nesting": ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    "deep_in_data": (
        json.dumps([{**task(1), "data": "X"}]).replace('"X"', "[" * 50_000 + "]" * 50_000),
        "nested deeper",
    ),
    "task_not_object": (json.dumps([task(0), "oops"]), "task 1"),
    "task_id_object": (json.dumps(edited(set_at("id", {"a": 1}))), "'id'"),
    "annotations_object": (json.dumps(edited(set_at("annotations", {"a": 1}))), "'annotations'"),
    "annotation_string": (json.dumps(edited(set_at("annotations", 0, "oops"))), "annotation 0"),
    "cancelled_text": (
        json.dumps(edited(set_at("annotations", 0, "was_cancelled", "no"))),
        "'was_cancelled'",
    ),
    "completed_by_list": (
        json.dumps(edited(set_at("annotations", 0, "completed_by", [1, 2]))),
        "'completed_by'",
    ),
    "completed_by_id_object": (
        json.dumps(edited(set_at("annotations", 0, "completed_by", {"id": {"x": 1}}))),
        "'completed_by.id'",
    ),
    "ground_truth_list": (
        json.dumps(edited(set_at("annotations", 0, "ground_truth", [True]))),
        "'ground_truth'",
    ),
    "result_string": (json.dumps(edited(set_at("annotations", 0, "result", "oops"))), "'result'"),
    "region_number": (json.dumps(edited(set_at(*REGION[:-1], 0, 7))), "region 0"),
    "value_list": (json.dumps(edited(set_at(*REGION, "value", ["pos"]))), "'value'"),
    "choices_string": (
        json.dumps(edited(set_at(*REGION, "value", "choices", "pos"))),
        "'value.choices'",
    ),
    "choices_number": (
        json.dumps(edited(set_at(*REGION, "value", "choices", 3))),
        "'value.choices'",
    ),
    "choice_object": (
        json.dumps(edited(set_at(*REGION, "value", "choices", [{"a": 1}]))),
        "'value.choices'",
    ),
    "from_name_list": (json.dumps(edited(set_at(*REGION, "from_name", ["s"]))), "'from_name'"),
    "truncated": (json.dumps([task(0), task(1)])[:-30], "Cannot parse"),
    "trailing_garbage": (json.dumps([task(0)]) + " [1]", "extra data"),
    "not_utf8": (json.dumps([task(0)]).replace("a review", "caf\udce9"), "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_label_studio_gets_a_one_line_error(name, tmp_path, capsys):
    text, word = HOSTILE[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    out = tmp_path / "out.csv"
    code, _, err = run(["infer", path, "-m", "mv", "-o", out], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err
    assert word in err
    assert not out.exists()


def test_hostile_label_studio_raises_privtd_errors_in_python(tmp_path):
    path = write_json(tmp_path / "a.json", edited(set_at(*REGION, "value", "choices", "pos")))
    with pytest.raises(SchemaError, match=r"task 0 \(id '1'\), annotation 0, region 0"):
        io.read_label_studio(path)


def test_the_task_reader_matches_json_load_across_window_edges(tmp_path, monkeypatch):
    # A window of 7 characters makes every task cross several window edges.
    monkeypatch.setattr(label_studio, "_CHUNK", 7)
    tasks = [task(i, text="x" * (i * 13)) for i in range(40)] + [{"id": 99, "annotations": []}]
    path = tmp_path / "a.json"
    path.write_text("\ufeff \n" + json.dumps(tasks, indent=2) + "\n")
    assert list(label_studio.iter_tasks(str(path))) == tasks
    path.write_text("[]")
    assert list(label_studio.iter_tasks(str(path))) == []
    path.write_text('[{"id": 1, "annotations": []} {"id": 2}]')
    with pytest.raises(ValidationError, match="expected ',' or ']'"):
        list(label_studio.iter_tasks(str(path)))


def test_label_studio_answers_survive_the_streaming_reader(tmp_path, monkeypatch):
    tasks = [task(i) for i in range(30)]
    tasks[3]["annotations"][0]["completed_by"] = {"id": 7, "email": "a@b.c"}
    tasks[4]["annotations"][1]["was_cancelled"] = True
    path = write_json(tmp_path / "a.json", tasks)
    whole = io.read_label_studio(path).answers.to_frame()
    monkeypatch.setattr(label_studio, "_CHUNK", 5)
    windowed = io.read_label_studio(path).answers.to_frame()
    assert whole.equals(windowed)
    assert len(whole) == 30 * 3 - 1
    assert "7" in set(whole["worker"].astype(str))


def peak_bytes(read, path):
    read(path)  # imports and caches first, so that only the read is measured
    tracemalloc.start()
    try:
        read(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_label_studio_memory_does_not_hold_the_whole_export(tmp_path):
    # 400 tasks of 16 KB of data each (6.5 MB): the tree of the whole file holds every task's
    # text (at least the file's size); read task by task, memory holds one task and the
    # answers.
    tasks = [task(i, text=f"{i} " + "y" * 16_000) for i in range(400)]
    path = write_json(tmp_path / "big.json", tasks)
    size = (tmp_path / "big.json").stat().st_size
    assert peak_bytes(io.read, path) < 0.6 * size


def write_mturk(path, n_options, n_rows=60):
    head = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus"]
    options = [f"Answer.sentiment.o{j}.on" for j in range(n_options)]
    lines = [",".join(head + options)]
    for i in range(n_rows):
        cells = [""] * n_options
        cells[(i * 31) % n_options] = "true"
        status = "Rejected" if i == 5 else "Approved"
        lines.append(",".join([f"H{i % 25}", f"A{i}", f"W{i % 4}", status, *cells]))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_mturk_many_options_are_read_in_small_memory(tmp_path):
    # One column per option made each option a pandas column: 14 times the file at 4,000
    # options (and 26 s at 50,000); read row by row, only the checked option is kept.
    path = write_mturk(tmp_path / "wide.csv", 4000, n_rows=100)
    data = io.read(path)
    assert data.format == "mturk"
    frame = data.answers.to_frame()
    assert len(frame) == 99  # the Rejected assignment is left out
    expected = {f"o{(i * 31) % 4000}" for i in range(100) if i != 5}
    assert set(frame["answer"].astype(str)) == expected
    assert peak_bytes(io.read, path) < 6 * (tmp_path / "wide.csv").stat().st_size


@pytest.mark.parametrize(
    ("head", "row", "sep"),
    [
        (
            ["ASSIGNMENT:task_id", "ASSIGNMENT:worker_id", "OUTPUT:label"],
            ["t{i}", "w{i}", "y"],
            "\t",
        ),
        (["_unit_id", "_worker_id", "label", "label_gold"], ["u{i}", "w{i}", "y", ""], ","),
    ],
)
def test_toloka_and_appen_keep_only_the_columns_they_use(tmp_path, head, row, sep):
    # 4,000 input columns beside the few read (each used to become a pandas column).
    inputs = [f"INPUT:f{j}" if sep == "\t" else f"f{j}" for j in range(4000)]
    lines = [sep.join(inputs + head)]
    lines += [sep.join(["x"] * len(inputs) + [c.format(i=i) for c in row]) for i in range(100)]
    path = tmp_path / "wide.txt"
    path.write_text("\n".join(lines) + "\n")
    data = io.read(str(path))
    assert data.answers.n_answers == 100
    assert set(data.answers.to_frame()["answer"].astype(str)) == {"y"}


def test_mturk_several_options_in_a_wide_group_name_the_row(tmp_path):
    path = tmp_path / "wide.csv"
    write_mturk(path, 300, n_rows=10)
    lines = path.read_text().splitlines()
    cells = lines[4].split(",")
    cells[-1] = cells[-2] = "TRUE"
    lines[4] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValidationError, match=r"row 5: \['o93', 'o298', 'o299'\]"):
        io.read(str(path))


def test_mturk_ragged_row_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "ragged.csv"
    path.write_text("HITId,WorkerId,Answer.a\nh1,w1,x\nh2,w2,y,extra\n")
    code, _, err = run(["infer", path, "-m", "mv", "-o", tmp_path / "o.csv"], capsys)
    assert code == 2
    assert "line 3" in err and len(err.strip().splitlines()) == 1


def test_a_header_over_64_kb_is_detected(tmp_path):
    filler = [f"Input.field_{j:05d}" for j in range(6000)]  # 110 KB before the ids
    path = tmp_path / "wide.csv"
    head = [*filler, "HITId", "AssignmentId", "WorkerId", "Answer.label"]
    rows = [",".join(["x"] * len(filler) + [f"H{i}", f"A{i}", f"W{i}", "y"]) for i in range(3)]
    path.write_text("\n".join([",".join(head), *rows]) + "\n")
    assert len(",".join(head)) > 65536
    assert io.detect(str(path)) == "mturk"
    assert io.read(str(path)).answers.n_answers == 3


def test_a_label_studio_export_with_a_large_first_task_is_detected(tmp_path):
    path = write_json(tmp_path / "a.json", [{"data": {"text": "z" * 70_000}, **task(1)}])
    assert io.detect(path) == "label-studio"


def test_a_ragged_row_in_a_wide_mturk_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "wide.csv"
    write_mturk(path, 300, n_rows=6)
    with open(path, "a") as handle:
        handle.write("H9,A9,W9,Approved," + ",".join(["x"] * 301) + "\n")
    with pytest.raises(ValidationError, match="line 8 has 305 cells, the header 304"):
        io.read(str(path))
