"""P2's worker-private protocol: equal to plain EM, the requester's view, faults, drop-outs.

The attacks (drop-outs, single-answer tasks) are in tests/test_secure_attacks.py."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import privtd
from privtd.errors import ProtocolError, ValidationError
from privtd.inference import DawidSkene, LatentClass, OneCoinDawidSkene, Raykar
from privtd.inference._em import run_em
from privtd.secure import (
    DropoutError,
    InProcessTransport,
    ModelSpec,
    Requester,
    SecureEM,
    SocketTransport,
    Worker,
    fixed_point,
    messages,
    split_by_worker,
)
from privtd.secure.masking import MaskingWorker
from privtd.secure.models import AGGREGATE_MODELS, LOCAL_MODELS, LocalOneCoin
from privtd.secure.paillier import Packing

# Test-only key size: 512-bit Paillier is fast and breakable; the default is 2048, and anything
# shorter needs test_only_short_keys=True.
TEST_KEY_BITS = 512
SHORT = {"key_bits": TEST_KEY_BITS, "test_only_short_keys": True}


@pytest.fixture(scope="module")
def duchenne() -> privtd.Answers:
    return privtd.datasets.load("duchenne").answers


@pytest.fixture(scope="module")
def dog() -> privtd.Answers:
    return privtd.datasets.load("dog").answers


@pytest.fixture(scope="module")
def emotion() -> privtd.Answers:
    return privtd.datasets.load("emotion").answers


def first_tasks(answers: privtd.Answers, n: int) -> privtd.Answers:
    return answers.subset(answers.task < n)


def bound(answers: privtd.Answers) -> float:
    """Posterior tolerance: each sum is off by at most J 2^-(F+1); through a softmax that moves a
    posterior by at most a quarter of the error on a log-ratio (two sums), and EM's contraction
    keeps the error from growing over iterations. 1e3 times that covers the accumulation."""
    return 1e3 * 2 * fixed_point.sum_error_bound(fixed_point.FRACTION_BITS, answers.n_workers)


# ------------------------------------------------------------------ encoding
def test_message_round_trip_and_malformed_frames() -> None:
    message = {
        "type": "round",
        "round": 3,
        "participants": [1, 2],
        "state": np.linspace(0, 1, 5),
        "masked": np.arange(4, dtype=np.uint64),
        "key": b"abc",
    }
    out = messages.decode(messages.encode(message))
    assert out["type"] == "round" and out["participants"] == [1, 2] and out["key"] == b"abc"
    np.testing.assert_array_equal(out["state"], message["state"])
    assert out["masked"].dtype == np.uint64
    frame = messages.encode(message)
    for bad in (b"XXXX" + frame[4:], frame[:-3], frame + b"\0", frame[:6]):
        with pytest.raises(ProtocolError):
            messages.decode(bad)
    with pytest.raises(ProtocolError, match="dtype"):
        messages.encode({"x": np.zeros(2, dtype=np.float32)})
    with pytest.raises(ProtocolError, match="lacks the field"):
        messages.field({"type": "round"}, "state", np.ndarray)


def test_fixed_point_sum_error_is_within_the_bound() -> None:
    rng = np.random.default_rng(0)
    n_parties, f = 64, 20
    values = rng.uniform(-20, 20, size=(n_parties, 10_000))
    codes = [fixed_point.encode(v, f, 20.0) for v in values]
    total = np.zeros(10_000, dtype=np.uint64)
    for c in codes:
        total += c
    error = np.abs(fixed_point.decode(total, f) - values.sum(axis=0))
    limit = fixed_point.sum_error_bound(f, n_parties)
    assert error.max() <= limit
    # The bound is of the right order: a random sum uses a good part of it.
    assert error.max() > limit / 20
    with pytest.raises(ProtocolError, match="cannot be encoded"):
        fixed_point.encode(np.array([1.0, np.nan]), f, 20.0)
    with pytest.raises(ProtocolError, match="at most 20"):
        fixed_point.encode(np.array([21.0]), f, 20.0)


def test_paillier_packing_round_trip() -> None:
    rng = np.random.default_rng(1)
    n = (1 << 511) + 12345
    packing = Packing(n, 5, 46)
    values = rng.integers(-(2**44), 2**44, size=(5, 100))
    plain = [packing.pack(v.astype(np.int64).view(np.uint64)) for v in values]
    summed = [sum(col) for col in zip(*plain, strict=True)]
    out = packing.unpack(summed, 100, 5).view(np.int64)
    np.testing.assert_array_equal(out, values.sum(axis=0))
    with pytest.raises(ProtocolError, match="out of range"):
        packing.unpack([p + (1 << (8 * packing.slot_bytes - 1)) for p in summed], 100, 5)


# ------------------------------------------------------------------ equal to plain EM
def test_masking_binary_equals_latent_class_on_duchenne(duchenne: privtd.Answers) -> None:
    # The first 500 images: 38 of the 64 workers and 85 EM rounds to convergence. The protocol's
    # cost grows with the square of the worker count (every worker checks every other's
    # contribution each round), so the whole set (64 workers, 191 rounds) is for
    # benchmarks/; the tolerance is re-derived from the subset's worker count by bound().
    duchenne = first_tasks(duchenne, 500)
    secure = SecureEM().fit(duchenne)
    plain = LatentClass().fit(duchenne)
    assert secure.n_iter_ == plain.n_iter_ and secure.converged_
    diff = np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max()
    assert diff <= bound(duchenne)
    assert (secure.truths_ == plain.truths_).all()
    # Each worker's private parameters are those of the plain M-step.
    sens = plain.weights_["sensitivity"].to_numpy()
    mine = np.array([w.model.sensitivity for w in secure.workers_])  # type: ignore[union-attr]
    np.testing.assert_allclose(mine, sens, atol=1e-6)
    assert secure.rounds_.phase.tolist() == ["count", "start"] + ["em"] * secure.n_iter_
    # Every Duchenne task has at least 3 answers: none is left out, and the counts are exact.
    assert secure.too_few_answers_.empty
    np.testing.assert_array_equal(
        secure.answer_counts_, np.bincount(duchenne.task, minlength=duchenne.n_tasks)
    )


def test_masking_multiclass_equals_dawid_skene_on_dog(dog: privtd.Answers) -> None:
    # The first 300 images: 100 of the 109 workers, 13 EM rounds (cost: see the test above).
    dog = first_tasks(dog, 300)
    secure = SecureEM().fit(dog)
    plain = DawidSkene().fit(dog)
    assert secure.spec_.model == "multiclass" and secure.n_iter_ == plain.n_iter_
    assert np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max() <= bound(dog)
    assert (secure.truths_ == plain.truths_).all()
    np.testing.assert_allclose(secure.objective_, plain.objective_, atol=1e-9)


def test_masking_one_coin_equals_one_coin_dawid_skene_on_dog(dog: privtd.Answers) -> None:
    # As the multiclass test above: the first 300 images, 100 workers, 7 EM rounds.
    dog = first_tasks(dog, 300)
    secure = SecureEM(model="one-coin").fit(dog)
    plain = OneCoinDawidSkene().fit(dog)
    assert secure.spec_.model == "one-coin" and secure.n_iter_ == plain.n_iter_
    assert secure.converged_
    assert np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max() <= bound(dog)
    assert (secure.truths_ == plain.truths_).all()
    np.testing.assert_allclose(secure.objective_, plain.objective_, atol=1e-9)
    # Each worker's private accuracy is the plain M-step's.
    mine = np.array([w.model.accuracy for w in secure.workers_])  # type: ignore[union-attr]
    np.testing.assert_allclose(mine, plain.weights_["weight"].to_numpy(), atol=1e-9)


def test_paillier_one_coin_equals_masking_and_plain(dog: privtd.Answers) -> None:
    answers = first_tasks(dog, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        secure = SecureEM(model="one-coin", backend="paillier", max_iter=3, **SHORT)  # type: ignore[arg-type]
        secure.fit(answers)
        masked = SecureEM(model="one-coin", max_iter=3).fit(answers)
        plain = OneCoinDawidSkene(max_iter=3).fit(answers)
    assert np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max() <= bound(answers)
    np.testing.assert_array_equal(secure.probas_, masked.probas_)


@pytest.mark.parametrize("model", ["binary", "multiclass", "one-coin"])
def test_the_requester_model_on_plain_sums_is_the_plain_em(
    dog: privtd.Answers, duchenne: privtd.Answers, model: str
) -> None:
    # The requester's half is a model of privtd's one EM loop: on an executor that adds the
    # workers' halves in the clear (no fixed point, no protocol) it is the plain estimator.
    answers = first_tasks(duchenne if model == "binary" else dog, 100)
    spec = SecureEM(model=model).spec_for(answers)
    parts = [LOCAL_MODELS[model](spec, t, v) for t, v in split_by_worker(answers).values()]

    class PlainSum:
        def run(self, fn, params=None):  # type: ignore[no-untyped-def]
            return sum(fn(part, None, params)[1] for part in parts)

    aggregate = AGGREGATE_MODELS[model](spec, 1e-5 if model != "binary" else 1e-4)
    fit = run_em(aggregate, PlainSum(), 500)
    est = {"binary": LatentClass, "multiclass": DawidSkene, "one-coin": OneCoinDawidSkene}
    plain = est[model]().fit(answers)
    assert fit.converged and fit.n_iter == plain.n_iter_
    proba = np.column_stack([1 - fit.params, fit.params]) if model == "binary" else fit.params
    np.testing.assert_allclose(proba, plain.probas_.to_numpy(), atol=1e-9)


def test_masking_real_equals_raykar_on_emotion(emotion: privtd.Answers) -> None:
    low, high = -100.0, 100.0
    secure = SecureEM(value_range=(low, high), gamma=1e4).fit(emotion)
    plain = Raykar(gamma=1e4 / (high - low) ** 2, init="mean").fit(emotion)
    assert secure.spec_.model == "real" and secure.n_iter_ == plain.n_iter_
    # Truths are ratios of two sums of contributions in [0, 1]: the error scales with the range.
    diff = np.abs(secure.truths_.to_numpy() - plain.truths_.to_numpy()).max()
    assert diff <= (high - low) * 1e3 * bound(emotion)


@pytest.mark.parametrize("name", ["duchenne", "dog", "emotion"])
def test_paillier_equals_plain_em(name: str) -> None:
    answers = first_tasks(privtd.datasets.load(name).answers, 60)
    kwargs = {"value_range": (-100.0, 100.0)} if name == "emotion" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        secure = SecureEM(backend="paillier", max_iter=4, **SHORT, **kwargs)  # type: ignore[arg-type]
        secure.fit(answers)
        masked = SecureEM(max_iter=4, **kwargs).fit(answers)
    if name == "emotion":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", privtd.ConvergenceWarning)
            plain = Raykar(gamma=1e4 / 200**2, init="mean", max_iter=4).fit(answers)
        np.testing.assert_allclose(secure.truths_, plain.truths_, atol=1e-6)
        # Both backends add the same 64-bit codes exactly: the results are bit-identical.
        np.testing.assert_array_equal(secure.truths_, masked.truths_)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", privtd.ConvergenceWarning)
            est = LatentClass(max_iter=4) if name == "duchenne" else DawidSkene(max_iter=4)
            plain = est.fit(answers)
        diff = np.abs(secure.probas_.to_numpy() - plain.probas_.to_numpy()).max()
        assert diff <= bound(answers)
        np.testing.assert_array_equal(secure.probas_, masked.probas_)


# ------------------------------------------------------------------ the requester's view
class Recording(InProcessTransport):
    """Keeps every frame the requester receives."""

    def __init__(self, workers: list[Worker]) -> None:
        super().__init__(workers)
        self.seen: list[tuple[int, messages.Message]] = []

    def call(self, requests: dict[int, bytes]) -> dict[int, bytes | None]:
        replies = super().call(requests)
        for worker, frame in replies.items():
            if frame is not None:
                self.seen.append((worker, messages.decode(frame)))
        return replies


def run_recorded(
    answers: privtd.Answers, backend: str, **kwargs: object
) -> tuple[Recording, list[Worker]]:
    short = bool(kwargs.get("test_only_short_keys", False))
    workers = [
        Worker(w, t, v, test_only_short_keys=short)
        for w, (t, v) in split_by_worker(answers).items()
    ]
    transport = Recording(workers)
    spec = SecureEM().spec_for(answers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        Requester(spec, transport, backend, **kwargs).run()  # type: ignore[arg-type]
    return transport, workers


def test_masked_contributions_are_uniform_and_hide_labels(duchenne: privtd.Answers) -> None:
    answers = first_tasks(duchenne, 300)
    transport, workers = run_recorded(answers, "masking", max_iter=3)
    fields = {k for _, m in transport.seen for k in m} - {"type", "round", "attempt"}
    # All the requester ever receives: public keys (the masking key is the worker's long-term
    # identity), each worker's fresh nonce, masked vectors and their tags (HMACs under pair
    # keys, for the other workers to verify). No time, nor any other number of the worker's.
    assert fields == {"public_key", "identity", "nonce", "masked", "tags"}
    masked = [(w, m["masked"]) for w, m in transport.seen if m["type"] == "contribution"]
    # The count round, the start round and three EM rounds.
    assert len(masked) == 5 * len(workers)
    pooled = np.concatenate([v for _, v in masked])
    # Each 64-bit value is uniform: its top byte and its bottom byte are flat (chi-square).
    for shift in (56, 0):
        counts = np.bincount(
            ((pooled >> np.uint64(shift)) & np.uint64(255)).astype(int), minlength=256
        )
        assert stats.chisquare(counts).pvalue > 1e-4
    # And none of a worker's own codes (which repeat a handful of log-probabilities) shows up.
    by_worker = {w.worker_id: w for w in workers}
    for worker_id, vector in masked[-len(workers) :]:
        model = by_worker[worker_id].model
        assert model is not None
        codes = fixed_point.encode(model.contribution(), fixed_point.FRACTION_BITS, 100.0)
        assert np.intersect1d(codes, vector).size == 0
        # A worker who answered a few tasks sends as many values as one who answered all.
        assert vector.size == answers.n_tasks * 2


def test_paillier_requester_sees_only_ciphertexts_and_blinded_sums(
    duchenne: privtd.Answers,
) -> None:
    answers = first_tasks(duchenne, 40)
    transport, workers = run_recorded(answers, "paillier", max_iter=1, **SHORT)
    holder = next(w for w in workers if w._sum is not None and w._sum._private is not None)  # noqa: SLF001
    public = holder._sum._public  # type: ignore[union-attr]  # noqa: SLF001
    fields = {k for _, m in transport.seen for k in m} - {"type", "round", "attempt"}
    # Public keys (Paillier's; each worker's long-term identity), ciphertexts, blinded sums.
    assert fields == {"paillier_n", "identity", "ciphertexts", "plaintexts"}
    for _, message in transport.seen:
        for row in message.get("ciphertexts", np.zeros((0, 1), dtype=np.uint8)):
            assert 0 < int.from_bytes(row.tobytes(), "big") < public.nsquare
    # The key holder's plaintexts are blinded, uniform modulo n: their bytes are flat, where a
    # true packed sum has zero bytes in every slot's headroom and above the last slot.
    plain = [m["plaintexts"] for _, m in transport.seen if m["type"] == "plaintexts"]
    width = plain[0].shape[1]
    low = np.concatenate([p[:, width // 2 + 1 :].ravel() for p in plain])  # below n's top byte
    assert stats.chisquare(np.bincount(low, minlength=256)).pvalue > 1e-4


# ------------------------------------------------------------------ faults
class Faulty(Worker):
    """A worker that tampers with its contribution after the given round."""

    def __init__(self, *args: object, fault: str, at: int = 2, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fault = fault
        self.at = at

    def handle(self, frame: bytes) -> bytes:
        request = messages.decode(frame)
        reply = messages.decode(super().handle(frame))
        if request["type"] != "round" or request["round"] < self.at:
            return messages.encode(reply)
        if self.fault == "drop":
            raise ConnectionError("gone")
        if self.fault == "short":
            reply["masked"] = reply["masked"][:-1]
        elif self.fault == "overflow":
            reply["masked"] = reply["masked"] + np.uint64(2**62)
        elif self.fault == "round":
            reply["round"] = request["round"] + 1
        elif self.fault == "garbage":
            return b"PTD1 this is not a frame"
        elif self.fault == "ciphertext":
            reply["ciphertexts"] = np.full_like(reply["ciphertexts"], 255)
        return messages.encode(reply)


def faulty_run(answers: privtd.Answers, fault: str, backend: str = "masking", **kwargs: object):  # type: ignore[no-untyped-def]
    held = split_by_worker(answers)
    policy = {k: bool(kwargs.get(k, False)) for k in ("allow_leaky_rerun", "test_only_short_keys")}
    workers = [
        Faulty(w, t, v, fault=fault, **policy) if w == 0 else Worker(w, t, v, **policy)
        for w, (t, v) in held.items()
    ]
    spec = SecureEM().spec_for(answers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        return Requester(spec, InProcessTransport(workers), backend, max_iter=5, **kwargs).run()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("short", "Worker 0: .*expected uint64"),
        ("overflow", "outside .* The round is void"),
        ("round", "another round"),
        ("garbage", "Worker 0 sent a malformed reply"),
    ],
)
def test_a_bad_contribution_voids_the_round(
    duchenne: privtd.Answers, fault: str, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message):
        faulty_run(first_tasks(duchenne, 100), fault)


class Shifted(Worker):
    """A worker that adds ``delta`` to one sum of every EM round: masked codes add, so it
    passes no value through its own encoding check."""

    def __init__(self, *args: object, delta: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.delta = delta

    def handle(self, frame: bytes) -> bytes:
        request = messages.decode(frame)
        reply = messages.decode(super().handle(frame))
        if request["type"] == "round" and request["phase"] == "em":
            shift = fixed_point.encode([self.delta], fixed_point.FRACTION_BITS, abs(self.delta))
            masked = reply["masked"].copy()
            masked[:1] += shift
            reply["masked"] = masked
        return messages.encode(reply)


def test_one_coin_range_is_its_largest_contribution() -> None:
    spec = ModelSpec("one-coin", 2, 3)
    assert spec.max_abs == pytest.approx(-np.log(1e-10)) and spec.n_sums == 3
    worker = LocalOneCoin(spec, np.array([0, 1]), np.array([0, 2]))
    largest = []
    for accuracy in (0.0, 1e-12, 1.0 / 3, 1.0 - 1e-12, 1.0):
        worker.accuracy = accuracy
        largest.append(np.abs(worker.contribution()).max())
    # A certain worker's wrong labels are at the clip: the range is reached, never passed.
    assert max(largest) <= spec.max_abs and max(largest) == pytest.approx(spec.max_abs)


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_an_out_of_range_one_coin_contribution_voids_the_round(
    dog: privtd.Answers, sign: float
) -> None:
    answers = first_tasks(dog, 30)
    held = split_by_worker(answers)
    spec = SecureEM(model="one-coin").spec_for(answers)
    assert spec.model == "one-coin"
    # Below -n log(1e-10) (n workers' clipped log-probabilities), or above 0, no n honest
    # workers' contributions can sum.
    delta = sign * (len(held) + 1) * -np.log(1e-10)
    workers = [
        Shifted(w, t, v, delta=delta) if w == 0 else Worker(w, t, v) for w, (t, v) in held.items()
    ]
    rounds: list[str] = []
    requester = Requester(
        spec, InProcessTransport(workers), on_round=lambda r: rounds.append(r.phase)
    )
    with pytest.raises(ProtocolError, match="1 secure sum.* of the E-step round fall outside"):
        requester.run()
    # Refused by the requester's range check on the first EM round's sums (count rounds are
    # not reported).
    assert rounds == ["start"] and requester.rounds[-1].phase == "em"


def test_the_secure_sum_runs_only_the_protocols_phases() -> None:
    # Workers receive a phase's name, never code: any other step is refused before a round.
    from privtd.secure.parties import SecureSum

    with pytest.raises(ValidationError, match="runs only the protocol's phases \\(start, em\\)"):
        SecureSum(None, None).run(lambda part, previous, params: (None, 0))  # type: ignore[arg-type]


def test_every_secure_model_is_offered_by_the_cli() -> None:
    from privtd.cli.secure import secure_em_cmd
    from privtd.secure import MODELS

    option = next(p for p in secure_em_cmd.params if p.name == "model")
    assert set(option.type.choices) == {"auto", "glad", *MODELS}  # type: ignore[attr-defined]


def test_glad_is_refused_with_the_reason(dog: privtd.Answers) -> None:
    for make in (lambda: SecureEM(model="glad").fit(dog), lambda: ModelSpec("glad", 3)):
        with pytest.raises(ValidationError, match="GLAD is not available under the secure sum"):
            make()


def test_a_bad_ciphertext_voids_the_round(duchenne: privtd.Answers) -> None:
    with pytest.raises(ProtocolError, match="Worker 0: .*outside the key's range"):
        faulty_run(first_tasks(duchenne, 30), "ciphertext", "paillier", **SHORT)


def test_a_drop_out_ends_the_run_by_default(duchenne: privtd.Answers) -> None:
    stops = r"Worker\(s\) '0' dropped out in em round 2; the run stops"
    with pytest.raises(DropoutError, match=stops):
        faulty_run(first_tasks(duchenne, 100), "drop")


def test_a_drop_out_retries_the_round_without_the_worker_if_allowed(
    duchenne: privtd.Answers,
) -> None:
    run = faulty_run(first_tasks(duchenne, 100), "drop", allow_leaky_rerun=True)
    assert run.dropped == [0]
    rounds = {r.round: r for r in run.rounds}
    assert rounds[2].attempts == 2 and rounds[2].participants == rounds[1].participants - 1
    assert np.isfinite(run.state).all()


def test_workers_refuse_unsafe_rounds() -> None:
    worker = MaskingWorker(0, min_participants=3)
    worker.setup({"type": "setup", "session": b"s" * 16})
    others = [MaskingWorker(i) for i in (1, 2)]
    keys = [worker.setup({"session": b"s" * 16})["public_key"]]
    keys += [o.setup({"session": b"s" * 16})["public_key"] for o in others]
    worker.set_keys(
        {
            "key_owners": [0, 1, 2],
            "public_keys": np.frombuffer(b"".join(keys), np.uint8).reshape(3, 32),
        }
    )
    codes = np.zeros(4, dtype=np.uint64)
    worker.protect(codes, 1, 0, [0, 1, 2])
    with pytest.raises(ProtocolError, match="reuse"):
        worker.protect(codes, 1, 0, [0, 1, 2])
    with pytest.raises(ProtocolError, match="at least 3"):
        worker.protect(codes, 2, 0, [0, 1])
    with pytest.raises(ProtocolError, match="No pair key"):
        worker.protect(codes, 3, 0, [0, 1, 7])


def test_pairwise_masks_cancel_exactly() -> None:
    session = b"x" * 16
    parties = [MaskingWorker(i) for i in range(5)]
    keys = np.frombuffer(
        b"".join(p.setup({"session": session})["public_key"] for p in parties), np.uint8
    ).reshape(5, 32)
    for p in parties:
        p.set_keys({"key_owners": list(range(5)), "public_keys": keys})
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 2**63, size=(5, 50), dtype=np.uint64)
    total = np.zeros(50, dtype=np.uint64)
    for p, c in zip(parties, codes, strict=True):
        total += p.protect(c, 1, 0, list(range(5)))["masked"]
    expected = np.zeros(50, dtype=np.uint64)
    for c in codes:
        expected += c
    np.testing.assert_array_equal(total, expected)


def test_masks_cancel_only_when_every_worker_got_the_same_request() -> None:
    # The masks are bound to the request each worker received (its digest as ``context``):
    # a requester that tells one worker something else (other posteriors, other kept tasks)
    # gets a uniformly random sum, not that worker's contribution (attack_split_state.py).
    session = b"x" * 16
    parties = [MaskingWorker(i) for i in range(4)]
    keys = np.frombuffer(
        b"".join(p.setup({"session": session})["public_key"] for p in parties), np.uint8
    ).reshape(4, 32)
    for p in parties:
        p.set_keys({"key_owners": list(range(4)), "public_keys": keys})
    codes = np.arange(40, dtype=np.uint64).reshape(4, 10)
    expected = codes.sum(axis=0, dtype=np.uint64)
    for round_, contexts in ((1, [b"a"] * 4), (2, [b"a", b"a", b"b", b"a"])):
        total = np.zeros(10, dtype=np.uint64)
        for p, c, ctx in zip(parties, codes, contexts, strict=True):
            total += p.protect(c, round_, 0, list(range(4)), context=ctx)["masked"]
        if round_ == 1:
            np.testing.assert_array_equal(total, expected)
        else:
            assert (total != expected).all()


def test_bad_parameters_are_clear(duchenne: privtd.Answers, emotion: privtd.Answers) -> None:
    with pytest.raises(ValidationError, match="needs the public answer range"):
        SecureEM().fit(emotion)
    with pytest.raises(ValidationError, match="outside the public range"):
        SecureEM(value_range=(0.0, 10.0)).fit(emotion)
    with pytest.raises(ValidationError, match="does not fit categorical"):
        SecureEM(model="real").fit(duchenne)
    with pytest.raises(ValidationError, match="Unknown backend"):
        SecureEM(backend="rot13").fit(duchenne)
    with pytest.raises(ValidationError, match="binary model needs exactly 2"):
        SecureEM(model="binary").fit(privtd.datasets.load("dog").answers)
    tiny = privtd.Answers.from_frame(
        pd.DataFrame({"task": [1, 1, 2], "worker": ["a", "b", "a"], "answer": [0, 1, 1]})
    )
    with pytest.raises(ValidationError, match="at least 3 workers"):
        SecureEM().fit(tiny)
    with pytest.raises(ValidationError, match="fraction_bits=60"):
        SecureEM(fraction_bits=60).fit(duchenne)
    with pytest.raises(ValidationError, match="Unknown model"):
        ModelSpec("ternary", 3)


@pytest.mark.parametrize("model", ["binary", "multiclass", "real"])
def test_a_worker_without_a_kept_task_sends_zeros(model: str) -> None:
    # Worker d answered only task 9, which has one answer: it is left out, and d takes part in
    # every round with zeros (its masks are still needed), whatever the model.
    rows = [(t, w, (t + i) % 2) for t in range(9) for i, w in enumerate("abc")] + [(9, "d", 1)]
    frame = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    kwargs: dict[str, object] = {}
    if model == "real":
        frame["answer"] = frame.answer.astype(float)
        kwargs["value_range"] = (0.0, 1.0)
    answers = privtd.Answers.from_frame(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        secure = SecureEM(model=model, max_iter=20, **kwargs).fit(answers)  # type: ignore[arg-type]
    assert list(secure.too_few_answers_) == [9] and secure.truths_.isna().tolist() == [
        False
    ] * 9 + [True]
    assert (secure.rounds_.participants == 4).all()


# ------------------------------------------------------------------ across processes
def test_processes_give_the_in_process_result(emotion: privtd.Answers) -> None:
    answers = first_tasks(emotion, 200)
    kwargs = {"value_range": (-100.0, 100.0)}
    apart = SecureEM(processes=True, **kwargs).fit(answers)  # type: ignore[arg-type]
    together = SecureEM(**kwargs).fit(answers)  # type: ignore[arg-type]
    assert apart.n_iter_ == together.n_iter_
    np.testing.assert_allclose(apart.truths_, together.truths_, rtol=0, atol=1e-12)
    # Same messages; only the reported compute time in each reply header differs in length.
    sent = apart.rounds_.worker_bytes_sent.sum(), together.rounds_.worker_bytes_sent.sum()
    assert abs(sent[0] - sent[1]) < 1e-3 * sent[1]


@pytest.mark.parametrize("allow", [False, True])
def test_a_killed_worker_process_is_dropped(duchenne: privtd.Answers, allow: bool) -> None:
    answers = first_tasks(duchenne, 100)
    held = split_by_worker(answers)
    transport = SocketTransport(held, timeout=30, worker_options={"allow_leaky_rerun": allow})
    victim = transport.processes[0]

    def kill_at_round_two(stats: object) -> None:
        if getattr(stats, "round", 0) == 1 and victim.is_alive():
            victim.kill()
            victim.join()

    spec = SecureEM().spec_for(answers)
    requester = Requester(
        spec, transport, max_iter=4, on_round=kill_at_round_two, allow_leaky_rerun=allow
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        if not allow:
            with pytest.raises(DropoutError, match="dropped out in em round 2"):
                requester.run()
            # Nothing was released after the drop-out: the last round had every worker.
            assert [r.participants for r in requester.rounds] == [len(held)] * 3
            return
        run = requester.run()
    assert run.dropped == [sorted(held)[0]]
    assert {r.round: r.attempts for r in run.rounds}[2] == 2
