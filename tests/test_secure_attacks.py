"""Attacks on the secure EM, as a semi-honest requester would run them.

Each attack lives in ``benchmarks/attacks/`` (one command each) and is called from here:

- drop-out (point 1): difference the sums of a round with every worker and of the same round,
  or a re-run, without one; before the fix this recovered every label of the missing worker.
- grouping (point 2): tasks answered by one worker carry that worker's own terms; before the
  fix 20 groups of single-answer tasks named 20 workers and their parameters.

Plus what the fixes promise: the opt-in leaks as documented, the campaign record, ``min_answers``
and the equivalence with plain EM on the tasks kept, and the Paillier key-size floor.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import privtd
from privtd.errors import ProtocolError, ValidationError
from privtd.inference import LatentClass
from privtd.secure import Campaign, DropoutError, SecureEM, messages
from privtd.secure.paillier import PaillierWorker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "attacks"))

import secure_dropout  # noqa: E402
import secure_grouping  # noqa: E402
from secure_common import binary_crowd, run_recorded  # noqa: E402

SHORT = {"key_bits": 512, "test_only_short_keys": True}


@pytest.fixture(scope="module")
def dropout_crowd() -> tuple[privtd.Answers, int]:
    return secure_dropout.scenario(0)


@pytest.fixture(scope="module")
def sparse_crowd() -> privtd.Answers:
    return secure_grouping.scenario(0)


# ------------------------------------------------------------------ point 1: drop-outs
@pytest.mark.parametrize("drop_at", [3, 10])
def test_dropout_attack_recovers_nothing_by_default(
    dropout_crowd: tuple[privtd.Answers, int], drop_at: int
) -> None:
    answers, victim = dropout_crowd
    result = secure_dropout.attack(answers, victim, drop_at=drop_at)
    # The run stopped at the drop-out, and no sum over the remaining workers was released.
    assert result.error is not None and "dropped out in em round" in result.error
    assert "would reveal which tasks the missing worker(s) answered" in result.error
    assert not result.reduced_released
    assert result.labels_recovered == 0.0 and result.answered_accuracy is None
    run = run_recorded(answers, drop=victim, drop_at=drop_at)
    assert isinstance(run.error, DropoutError)
    everyone = tuple(range(answers.n_workers))
    assert run.releases and all(r.participants == everyone for r in run.releases)
    assert [r.round for r in run.releases if r.phase == "em"] == list(range(1, drop_at))


def test_a_rerun_without_a_worker_is_refused_by_default(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    answers, victim = dropout_crowd
    result = secure_dropout.attack(answers, victim, mode="rerun", max_iter=30)
    assert result.error is not None and "leaves out worker 'w" in result.error
    assert "allow_leaky_rerun=True" in result.error
    assert not result.reduced_released and result.labels_recovered == 0.0


def test_with_the_flag_the_dropout_leaks_as_documented(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    answers, victim = dropout_crowd
    # docs/secure.md: from round 10 on, the retried round gives away every task the missing
    # worker answered and every label it gave; so does a re-run without it.
    late = secure_dropout.attack(answers, victim, drop_at=10, allow_leaky_rerun=True)
    assert late.reduced_released and late.answered_accuracy == 1.0
    assert late.labels_recovered == 1.0
    rerun = secure_dropout.attack(
        answers, victim, mode="rerun", max_iter=100, allow_leaky_rerun=True
    )
    assert rerun.reduced_released and rerun.answered_accuracy is not None
    assert rerun.answered_accuracy > 0.95 and rerun.labels_recovered > 0.95


def test_paillier_dropout_also_ends_the_run() -> None:
    answers, _ = binary_crowd(6, 40, 0.6, np.random.default_rng(3))
    run = run_recorded(answers, drop=2, drop_at=2, backend="paillier", max_iter=4, **SHORT)
    assert isinstance(run.error, DropoutError)
    assert all(len(r.participants) == 6 for r in run.releases)


def test_workers_refuse_a_round_over_fewer_workers_than_at_setup(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    # A requester that retries without a worker (or invents a drop-out) meets workers that did
    # not allow leaky re-runs: they refuse, and nothing is summed.
    answers, victim = dropout_crowd
    from secure_common import DroppingWorker, RecordingRequester

    from privtd.secure import InProcessTransport, Worker, split_by_worker

    held = split_by_worker(answers)
    workers = [
        DroppingWorker(w, t, v, at=2) if w == victim else Worker(w, t, v)
        for w, (t, v) in held.items()
    ]
    requester = RecordingRequester(
        SecureEM().spec_for(answers), InProcessTransport(workers), allow_leaky_rerun=True
    )
    with pytest.raises(ProtocolError, match="did not allow leaky re-runs"):
        requester.run()
    assert all(len(r.participants) == len(held) for r in requester.releases)


def test_the_campaign_record_links_fits_and_files(
    dropout_crowd: tuple[privtd.Answers, int], tmp_path: Path
) -> None:
    answers, victim = dropout_crowd
    without = answers.subset(answers.worker != victim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # One SecureEM object is one campaign.
        est = SecureEM(max_iter=3)
        est.fit(answers)
        with pytest.raises(ValidationError, match="leaves out worker 'w"):
            est.fit(without)
        # A file links separate objects (and separate CLI runs).
        record = tmp_path / "campaign.json"
        SecureEM(max_iter=3, campaign=record).fit(answers)
        assert Campaign.open(record).runs == [frozenset(map(str, answers.workers))]
        with pytest.raises(ValidationError, match="leaves out"):
            SecureEM(max_iter=3, campaign=record).fit(without)
        # Adding a worker leaks the added one's answers the same way.
        fresh = tmp_path / "fresh.json"
        SecureEM(max_iter=3, campaign=fresh).fit(without)
        with pytest.raises(ValidationError, match="adds worker"):
            SecureEM(max_iter=3, campaign=fresh).fit(answers)
        SecureEM(max_iter=3, campaign=record, allow_leaky_rerun=True).fit(without)
        assert len(Campaign.open(record).runs) == 2
        bad = tmp_path / "bad.json"
        bad.write_text("not json")
        with pytest.raises(ValidationError, match="not a privtd campaign file"):
            SecureEM(campaign=bad).fit(answers)


# ------------------------------------------------------------------ point 1: fresh runs
@pytest.mark.parametrize(
    ("mode", "backend"), [("fresh", "masking"), ("substitute", "masking"), ("fresh", "paillier")]
)
def test_a_fresh_run_without_a_worker_is_refused_by_the_other_workers(
    dropout_crowd: tuple[privtd.Answers, int], mode: str, backend: str
) -> None:
    # A dishonest requester keeps no campaign record: it runs with every worker, then starts a
    # fresh run without the victim (or with its own worker under the victim's code and name).
    # Before the workers kept their own record, this recovered 148 of the victim's 150 labels.
    answers, victim = dropout_crowd
    options = SHORT if backend == "paillier" else {}
    result = secure_dropout.attack(
        answers, victim, mode=mode, backend=backend, max_iter=30, **options
    )
    assert result.error is not None and "refused: this run shares" in result.error
    assert "whose workers differ from this one's (1 missing, " in result.error
    assert not result.reduced_released and result.labels_recovered == 0.0


def test_a_fresh_run_leaks_where_the_workers_allow_it(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    # The same attack against workers that allowed leaky re-runs: everything, as documented.
    answers, victim = dropout_crowd
    result = secure_dropout.attack(
        answers, victim, mode="fresh", max_iter=100, allow_leaky_rerun=True
    )
    assert result.reduced_released and result.answered_accuracy == 1.0
    assert result.labels_recovered > 0.95


def _held_with_names(answers: privtd.Answers) -> dict[int, dict[str, object]]:
    from privtd.secure import split_by_worker

    assert answers.labels is not None
    return {
        w: {
            "tasks": t,
            "values": v,
            "task_names": [str(x) for x in answers.tasks[t]],
            "value_names": [str(x) for x in answers.labels[v]],
        }
        for w, (t, v) in split_by_worker(answers).items()
    }


def test_the_workers_record_binds_their_keys_not_the_requesters_codes(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    from secure_common import RecordingRequester

    from privtd.secure import InProcessTransport, Worker, WorkerHistory

    answers, victim = dropout_crowd
    held = _held_with_names(answers)
    histories = {w: WorkerHistory() for w in held}
    spec = SecureEM().spec_for(answers)

    def run(codes: dict[int, int], requester_type: type = RecordingRequester) -> object:
        workers = [
            Worker(codes[w], history=histories[w], **h)  # type: ignore[arg-type]
            for w, h in held.items()
            if w in codes
        ]
        requester = requester_type(spec, InProcessTransport(workers), max_iter=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", privtd.ConvergenceWarning)
            requester.run()
        return requester

    run({w: w for w in held})
    # The same workers under other codes: the same run, accepted (and nothing new to learn).
    relabelled = run({w: (w + 5) % len(held) for w in held})
    assert relabelled.releases
    # The requester relays the victim's long-term key in the place of a worker of its own, so
    # that the list the others see is the earlier run's. They mask with the victim's key, which
    # only the victim could cancel: the sums are noise, refused by the requester's own range
    # check, and nothing is learnt.
    fake = victim
    real_key = histories[victim].public_key

    class Substituting(RecordingRequester):
        def _broadcast(self, message: messages.Message) -> dict[int, messages.Message]:
            if message.get("type") != "keys":
                return super()._broadcast(message)
            lied = dict(message)
            for name in ("identities", "public_keys"):
                rows = np.array(message[name])
                rows[message["identity_owners"].index(fake)] = np.frombuffer(real_key, np.uint8)
                lied[name] = rows
            frames = {w: messages.encode(message if w == fake else lied) for w in self.active}
            return self._call(frames, "ok")

    others = {w: w for w in held if w != victim}
    impostor = Worker(fake, **held[victim])  # type: ignore[arg-type]
    workers = [Worker(w, history=histories[w], **held[w]) for w in others] + [impostor]  # type: ignore[arg-type]
    requester = Substituting(spec, InProcessTransport(workers), max_iter=3)
    with pytest.raises(ProtocolError, match="count"):
        requester.run()
    count = requester.releases[0].sums[:, 0]
    assert not np.allclose(count, np.bincount(answers.task, minlength=answers.n_tasks))
    assert [r.phase for r in requester.releases] == ["count"]


def test_after_a_drop_out_in_the_count_round_the_others_want_it_back(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    # The others had sent their count contributions; they cannot know no sum was made.
    from secure_common import RecordingRequester

    from privtd.secure import InProcessTransport, Worker, WorkerHistory

    answers, victim = dropout_crowd
    held = _held_with_names(answers)
    histories = {w: WorkerHistory() for w in held}
    spec = SecureEM().spec_for(answers)

    class GoneAtCount(Worker):
        def handle(self, frame: bytes) -> bytes:
            if messages.decode(frame).get("phase") == "count":
                raise ConnectionError("the worker's connection closed")
            return super().handle(frame)

    workers = [
        (GoneAtCount if w == victim else Worker)(w, history=histories[w], **h)  # type: ignore[arg-type]
        for w, h in held.items()
    ]
    first = RecordingRequester(spec, InProcessTransport(workers), max_iter=3)
    with pytest.raises(DropoutError, match="will refuse a re-run without them"):
        first.run()
    assert first.releases == []
    rest = [Worker(w, history=histories[w], **h) for w, h in held.items() if w != victim]  # type: ignore[arg-type]
    second = RecordingRequester(spec, InProcessTransport(rest), max_iter=3)
    with pytest.raises(ProtocolError, match="1 missing, 0 added"):
        second.run()
    assert second.releases == []


def test_a_worker_refuses_a_rerun_with_changed_answers_and_keeps_unrelated_runs(
    dropout_crowd: tuple[privtd.Answers, int], tmp_path: Path
) -> None:
    import pandas as pd

    from privtd.secure import WorkerHistory

    answers, victim = dropout_crowd
    folder = tmp_path / "devices"
    folder.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SecureEM(max_iter=3, worker_history=folder).fit(answers)
        files = sorted(folder.iterdir())
        assert len(files) == answers.n_workers
        assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
        assert len(WorkerHistory.open(files[0]).runs) == 1
        # Another SecureEM (a fresh requester, a fresh campaign), the same devices.
        without = answers.subset(answers.worker != victim)
        with pytest.raises(ProtocolError, match=r"refused: this run shares \d+ of its tasks"):
            SecureEM(max_iter=3, worker_history=folder).fit(without)
        # The same workers and answers again: allowed (nothing new to difference).
        SecureEM(max_iter=3, worker_history=folder).fit(answers)
        # One worker changed one answer: it refuses (the difference would be its change).
        changed = answers.value.copy()
        first = int(np.flatnonzero(answers.worker == victim)[0])
        changed[first] = 1 - changed[first]
        altered = privtd.Answers.from_frame(
            pd.DataFrame(
                {
                    "task": answers.tasks[answers.task],
                    "worker": answers.workers[answers.worker],
                    "answer": np.asarray(answers.labels)[changed],
                }
            )
        )
        with pytest.raises(ProtocolError, match="its answers have changed since"):
            SecureEM(max_iter=3, worker_history=folder).fit(altered)
        # Other tasks (another campaign's) with another crowd: no task in common, accepted.
        other = altered.subset(altered.worker != victim)
        renamed = privtd.Answers.from_frame(
            pd.DataFrame(
                {
                    "task": ["other-" + str(t) for t in other.tasks[other.task]],
                    "worker": other.workers[other.worker],
                    "answer": np.asarray(other.labels)[other.value],
                }
            )
        )
        SecureEM(max_iter=3, worker_history=folder).fit(renamed)
        # The workers' own opt-in lets the leaky run go on.
        SecureEM(max_iter=3, worker_history=folder, allow_leaky_rerun=True).fit(without)
    bad = folder / "bad"
    bad.mkdir()
    (bad / "w000.json").write_text("not json")
    with pytest.raises(ValidationError, match="is not a privtd worker history"):
        SecureEM(max_iter=3, worker_history=bad).fit(answers)
    with pytest.raises(ValidationError, match="does not exist"):
        SecureEM(max_iter=3, worker_history=tmp_path / "nowhere").fit(answers)


def test_one_secure_em_keeps_its_workers_records_across_fits(
    dropout_crowd: tuple[privtd.Answers, int],
) -> None:
    # The default needs no setup: the in-memory records outlive a reset campaign record.
    answers, victim = dropout_crowd
    est = SecureEM(max_iter=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(answers)
        del est.campaign_  # the requester forgets its own record
        with pytest.raises(ProtocolError, match="1 missing, 0 added"):
            est.fit(answers.subset(answers.worker != victim))
        # Worker processes keep theirs in the object's private folder, just as well.
        apart = SecureEM(max_iter=3, processes=True)
        apart.fit(answers)
        del apart.campaign_
        with pytest.raises(ProtocolError, match="1 missing, 0 added"):
            apart.fit(answers.subset(answers.worker != victim))


# ------------------------------------------------------------------ point 2: few answers
@pytest.mark.parametrize("min_answers", [None, 2])
def test_grouping_attack_finds_no_group_of_one(
    sparse_crowd: privtd.Answers, min_answers: int | None
) -> None:
    options = {} if min_answers is None else {"min_answers": min_answers}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = secure_grouping.attack(sparse_crowd, **options)
    counts = np.bincount(sparse_crowd.task, minlength=sparse_crowd.n_tasks)
    assert result.n_single == int((counts == 1).sum()) > 100
    assert result.n_single_in_sums == 0
    assert result.groups_of_one == 0 and result.workers_exposed == 0
    assert result.min_answers_in_sums >= (min_answers or 3)


def test_tasks_with_too_few_answers_get_no_truth_and_the_rest_equal_plain_em(
    sparse_crowd: privtd.Answers,
) -> None:
    # 60 iterations keep the test fast: both sides stop at the same point.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        with pytest.warns(UserWarning, match="too few answers to protect"):
            secure = SecureEM(max_iter=60).fit(sparse_crowd)
    counts = np.bincount(sparse_crowd.task, minlength=sparse_crowd.n_tasks)
    few = counts < 3
    np.testing.assert_array_equal(secure.answer_counts_, counts)
    assert list(secure.too_few_answers_) == list(sparse_crowd.tasks[few])
    assert secure.truths_[few].isna().all() and secure.truths_[~few].notna().all()
    assert secure.probas_[few].isna().all().all()
    # On the tasks kept, the secure run is plain EM on those tasks alone.
    kept = sparse_crowd.subset(~few[sparse_crowd.task])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        plain = LatentClass(max_iter=60).fit(kept)
    assert secure.n_iter_ == plain.n_iter_
    ours = secure.probas_.loc[kept.tasks].to_numpy()
    bound = 1e3 * 2 * privtd.secure.fixed_point.sum_error_bound(40, sparse_crowd.n_workers)
    assert np.abs(ours - plain.probas_.to_numpy()).max() <= bound
    assert (secure.truths_.loc[kept.tasks] == plain.truths_).all()


def test_real_model_on_the_kept_tasks_equals_raykar() -> None:
    from privtd.inference import Raykar

    emotion = privtd.datasets.load("emotion").answers
    answers = emotion.subset(emotion.task < 80)
    # Thin out the first 20 tasks to 1 or 2 answers each, so that they are left out.
    rank = np.zeros(answers.n_answers, dtype=int)
    order = np.lexsort((answers.worker, answers.task))
    starts = np.searchsorted(answers.task[order], np.arange(answers.n_tasks))
    rank[order] = np.arange(answers.n_answers) - starts[answers.task[order]]
    thin = answers.subset((answers.task >= 20) | (rank < 1 + answers.task % 2))
    low, high = -100.0, 100.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        with pytest.warns(UserWarning, match="20 of 80 task"):
            secure = SecureEM(value_range=(low, high), max_iter=30).fit(thin)
    counts = np.bincount(thin.task)
    kept = thin.subset(counts[thin.task] >= 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        plain = Raykar(gamma=1e4 / (high - low) ** 2, init="mean", max_iter=30).fit(kept)
    assert secure.truths_.iloc[:20].isna().all()
    np.testing.assert_allclose(secure.truths_.loc[kept.tasks], plain.truths_, atol=1e-6)


def test_min_answers_is_checked(sparse_crowd: privtd.Answers) -> None:
    with pytest.raises(ValidationError, match="min_answers must be at least 2. Got 1"):
        SecureEM(min_answers=1).fit(sparse_crowd)
    with pytest.raises(ValidationError, match="No task has at least min_answers=50"):
        SecureEM(min_answers=50).fit(sparse_crowd)


def test_the_requester_never_sums_a_task_with_too_few_answers(
    sparse_crowd: privtd.Answers,
) -> None:
    # Not even the start sums (votes), which for a single answer would be the label itself.
    run = run_recorded(sparse_crowd, max_iter=3)
    counts = np.bincount(sparse_crowd.task, minlength=sparse_crowd.n_tasks)
    count_round, *later = run.releases
    assert count_round.phase == "count" and count_round.rows.size == sparse_crowd.n_tasks
    assert [r.phase for r in later] == ["start", "em", "em", "em"]
    for release in later:
        assert counts[release.rows].min() >= 3


# ------------------------------------------------------------------ point 7: key size
def test_short_paillier_keys_are_refused(sparse_crowd: privtd.Answers) -> None:
    with pytest.raises(ValidationError, match="A 1024-bit Paillier key can be factored"):
        SecureEM(backend="paillier", key_bits=1024).fit(sparse_crowd)
    # Each worker refuses a short key too, whoever made it.
    worker = PaillierWorker(0)
    with pytest.raises(ProtocolError, match="refuses a 512-bit Paillier key"):
        worker.setup({"type": "setup", "key_holder": True, "key_bits": 512})
    n = (1 << 511) + 1
    with pytest.raises(ProtocolError, match="refuses a 512-bit Paillier key"):
        worker.set_keys(
            messages.decode(
                messages.encode(
                    {"paillier_n": n.to_bytes(64, "big"), "n_parties": 3, "value_bits": 46}
                )
            )
        )


# ------------------------------------------------------------------ where the user meets it
def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from privtd.cli import main

    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def write_csv(answers: privtd.Answers, path: Path) -> Path:
    import pandas as pd

    assert answers.labels is not None
    pd.DataFrame(
        {
            "task": answers.tasks[answers.task],
            "worker": answers.workers[answers.worker],
            "answer": answers.labels[answers.value],
        }
    ).to_csv(path, index=False)
    return path


def test_secure_em_cli_reports_tasks_with_too_few_answers(
    sparse_crowd: privtd.Answers, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd

    path = write_csv(sparse_crowd, tmp_path / "sparse.csv")
    out = tmp_path / "truths.csv"
    code, _, err = cli(["secure-em", str(path), "-q", "--max-iter", "5", "-o", str(out)], capsys)
    few = int((np.bincount(sparse_crowd.task) < 3).sum())
    assert code == 0, err
    assert (
        f"note: {few} of {sparse_crowd.n_tasks} task(s) have fewer than 3 answers: too few " in err
    )
    truths = pd.read_csv(out)
    assert len(truths) == sparse_crowd.n_tasks and int(truths.truth.isna().sum()) == few
    for args, message in (
        (["--min-answers", "1"], "min_answers must be at least 2. Got 1"),
        (["--backend", "paillier", "--key-bits", "1024"], "A 1024-bit Paillier key can be"),
    ):
        code, _, err = cli(["secure-em", str(path), "-q", *args], capsys)
        assert code == 2 and message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    code, text, _ = cli(["secure-em", "--help"], capsys)
    flat = " ".join(text.split())
    assert "REVEALS ANSWERS" in flat and "a drop-out stops the run" in flat
    assert "Tasks with fewer than K answers" in flat and "stops the run" in flat


def test_secure_em_cli_refuses_a_rerun_without_a_worker(
    dropout_crowd: tuple[privtd.Answers, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers, victim = dropout_crowd
    full = write_csv(answers, tmp_path / "all.csv")
    reduced = write_csv(answers.subset(answers.worker != victim), tmp_path / "without.csv")
    record = str(tmp_path / "campaign.json")
    base = ["-q", "--max-iter", "3", "--campaign", record, "-o", str(tmp_path / "t.csv")]
    code, _, err = cli(["secure-em", str(full), *base], capsys)
    assert code == 0, err
    code, _, err = cli(["secure-em", str(reduced), *base], capsys)
    assert code == 2 and "leaves out worker" in err and "--allow-leaky-rerun" in err
    code, _, err = cli(["secure-em", str(reduced), *base, "--allow-leaky-rerun"], capsys)
    assert code == 0, err


def test_secure_em_cli_workers_refuse_a_fresh_rerun_without_a_worker(
    dropout_crowd: tuple[privtd.Answers, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers, victim = dropout_crowd
    full = write_csv(answers, tmp_path / "all.csv")
    reduced = write_csv(answers.subset(answers.worker != victim), tmp_path / "without.csv")
    devices = tmp_path / "devices"
    devices.mkdir()
    base = ["-q", "--max-iter", "3", "--worker-history", str(devices)]
    code, _, err = cli(["secure-em", str(full), *base, "-o", str(tmp_path / "t.csv")], capsys)
    assert code == 0, err
    # No --campaign: the requester kept no record. The workers did.
    for extra in ([], ["--processes"]):
        code, _, err = cli(["secure-em", str(reduced), *base, *extra], capsys)
        assert code == 2 and "refused: this run shares" in err and "1 missing" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, text, _ = cli(["secure-em", "--help"], capsys)
    flat = " ".join(text.split())
    assert "--worker-history DIR" in flat and "nothing stops a requester" in flat


def test_split_state_gets_no_contribution_with_masking() -> None:
    # attack_split_state: a requester that sends one worker other posteriors than the rest, in
    # a round over every worker, read all its labels from the difference with the honest round
    # (1.000 of 157). The masks are now bound to the request each worker received, so the
    # crafted round's masks do not cancel: its sum is uniform garbage.
    import attack_split_state

    answers, _ = binary_crowd(12, 300, 0.5, np.random.default_rng(0))
    out = attack_split_state.attack(answers)
    assert not out["crafted_sum_in_range"]
    assert out["labels_right"] < 0.75


def test_split_kept_list_gets_no_contribution() -> None:
    # The same through the kept-task list: the target alone told another list of the same
    # size, then one request for all. Before: 204 task sums changed, all by the target's
    # answers alone. Now a second list is refused, and the list is bound into the masks.
    import attack_split_state

    answers, _ = binary_crowd(12, 300, 0.5, np.random.default_rng(0))
    out = attack_split_state.attack_keep(answers)
    assert out["refused"] and "already set" in out["refused"]
    assert out["changed"] == 0


def test_a_crafted_broadcast_state_is_refused() -> None:
    # attack_crafted_state: a requester that sends every worker the same crafted posteriors
    # (1 at a task with one 1-vote, 0 elsewhere) read that voter's whole answer vector per round:
    # on this crowd 11 of 12 workers, 926 labels, 1.000 right, and the run finished normally.
    # Masking workers now compute every state themselves from sums they verify, and refuse one
    # sent to them.
    import attack_crafted_state

    answers, _ = binary_crowd(12, 300, 0.3, np.random.default_rng(0))
    out = attack_crafted_state.attack(answers, mode="state")
    assert out["workers_read"] == 0 and out["labels"] == 0
    assert not out["finished"]
    assert out["refused"] and "computes on no state it cannot check" in out["refused"]


def test_forged_sums_are_refused() -> None:
    # The same attack through the sums the workers verify: the requester alters one forwarded
    # contribution so that the sums give its crafted state. The contribution no longer carries
    # its sender's tag for the round, and every worker refuses.
    import attack_crafted_state

    answers, _ = binary_crowd(12, 300, 0.3, np.random.default_rng(0))
    out = attack_crafted_state.attack(answers, mode="forge")
    assert out["workers_read"] == 0 and not out["finished"]
    assert out["refused"] and "does not carry its tag" in out["refused"]


def test_forwarded_contributions_must_be_one_per_participant() -> None:
    # Leaving a participant's vector out, repeating one, or relaying them in another order is
    # refused before any sum is computed.
    from secure_common import RecordingRequester

    from privtd.secure import InProcessTransport, Worker, split_by_worker

    answers, _ = binary_crowd(6, 60, 0.6, np.random.default_rng(2))
    held = split_by_worker(answers)

    def tampered(change: str) -> str:
        class Tampering(RecordingRequester):
            def _shared(self, **computed: np.ndarray) -> messages.Message:
                fields = dict(super()._shared(**computed))
                masked = np.array(fields["forward_masked"])
                tagged = np.array(fields["forward_tags"])
                if change == "omit":
                    masked, tagged = masked[1:], tagged[1:]
                elif change == "repeat":
                    masked[1], tagged[1] = masked[0], tagged[0]
                else:
                    masked, tagged = masked[::-1], tagged[::-1]
                return {"forward_masked": masked, "forward_tags": tagged}

        workers = [Worker(w, t, v) for w, (t, v) in held.items()]
        spec = SecureEM().spec_for(answers)
        with pytest.raises(ProtocolError) as caught:
            Tampering(spec, InProcessTransport(workers), "masking", max_iter=2).run()
        return str(caught.value)

    assert "one each" in tampered("omit")
    assert "does not carry its tag" in tampered("repeat")
    assert "own contribution was forwarded altered" in tampered("reverse")


def test_workers_refuse_min_answers_under_their_floor() -> None:
    # A requester that lowered min_answers to 1 after construction kept every single-answer
    # task and read each lone label from the start sums (148 of 148, 1.000). Each worker now
    # refuses a run under its own floor (default 3), before anything depends on its answers.
    import attack_sybil

    out = attack_sybil.lowered(attack_sybil.scenario())
    assert out["read"] == 0
    assert isinstance(out["error"], ProtocolError)
    assert "refuses a run with min_answers=1" in str(out["error"])
    # A worker's floor is its own: one that accepts 2 takes part in a run of 2.
    from privtd.secure import Worker

    with pytest.raises(ValidationError, match="at least 2"):
        Worker(0, np.array([0]), np.array([1]), min_answers=1)


def test_no_timing_leaves_a_worker() -> None:
    # Each worker used to send its own CPU time with every reply (its rank correlation with the
    # worker's number of answers was 0.22-0.75). No reply carries a number of the worker's now:
    # every field is a key, a nonce, a masked vector or its tags.
    from privtd.secure import InProcessTransport, Requester, Worker, split_by_worker

    answers, _ = binary_crowd(8, 200, 0.4, np.random.default_rng(1))
    seen: list[messages.Message] = []

    class Listening(InProcessTransport):
        def call(self, requests: dict[int, bytes]) -> dict[int, bytes | None]:
            replies = super().call(requests)
            seen.extend(messages.decode(f) for f in replies.values() if f is not None)
            return replies

    workers = [Worker(w, t, v) for w, (t, v) in split_by_worker(answers).items()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        Requester(SecureEM().spec_for(answers), Listening(workers), max_iter=2).run()
    fields = {k for m in seen for k in m}
    assert fields == {
        "type",
        "round",
        "attempt",
        "public_key",
        "identity",
        "nonce",
        "masked",
        "tags",
    }
