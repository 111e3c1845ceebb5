"""Cost of P2's worker-private EM: Duchenne end to end, and growth with workers and tasks.

    python benchmarks/bench_secure.py duchenne             # masking: in-process and processes
    python benchmarks/bench_secure.py paillier --iters 1   # Paillier, 2048-bit, per iteration
    python benchmarks/bench_secure.py scale                # masking, synthetic, 16..1024 workers
    PYTHONPATH=/work/main/src python benchmarks/bench_secure.py scale   # another tree, same table
    python benchmarks/bench_secure.py scale --backend paillier --workers 16 32 64 --tasks 1000
    python benchmarks/bench_secure.py fraction-bits        # accuracy against fixed-point bits
    python benchmarks/bench_secure.py paillier-full --key-bits 1024   # to convergence (a key
                                                   # under 2048 bits times, protects nothing)

Targets: Duchenne to convergence with masking within 30 s in-process and 60 s with one
process per party, on the 2-core reference machine. Paillier's cost is measured, not targeted.
Per-iteration figures are means over the EM rounds (the start round is reported apart).
With masking, every EM round's request carries the last round's masked contributions of all
``J`` workers and their tags, which each worker checks and adds itself (docs/secure.md,
"Cost"): ``one_worker_receives_MB`` is that request.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import privtd
from privtd.secure import SecureEM


def summary(label: str, est: SecureEM, elapsed: float) -> None:
    rounds = est.rounds_
    em = rounds[rounds.phase == "em"]
    n_workers = int(rounds.participants.iloc[0])
    print(
        f"{label}: {est.n_iter_} iterations, {'converged' if est.converged_ else 'stopped'}, "
        f"total {elapsed:.2f} s\n"
        f"  per iteration: {em.seconds.mean():.3f} s wall; "
        f"requester {em.requester_seconds.mean():.4f} s; "
        f"workers max {em.worker_seconds_max.mean():.4f} s, "
        f"sum {em.worker_seconds_total.mean():.3f} s\n"
        f"  per iteration: requester sent {em.requester_bytes_sent.mean() / 1e6:.3f} MB, "
        f"workers sent {em.worker_bytes_sent.mean() / 1e6:.3f} MB "
        f"({em.worker_bytes_sent.mean() / n_workers / 1e3:.1f} kB each)"
    )


def duchenne(args: argparse.Namespace) -> None:
    answers = privtd.datasets.load("duchenne").answers
    print(
        f"duchenne: {answers.n_tasks} tasks, {answers.n_workers} workers, "
        f"{answers.n_answers} answers"
    )
    plain = privtd.inference.LatentClass().fit(answers)
    for processes in (False, True):
        start = time.perf_counter()
        est = SecureEM(backend="masking", processes=processes).fit(answers)
        elapsed = time.perf_counter() - start
        target = 60 if processes else 30
        label = "masking, one process per worker" if processes else "masking, in-process"
        summary(label, est, elapsed)
        diff = np.abs(est.probas_.to_numpy() - plain.probas_.to_numpy()).max()
        print(
            f"  target {target} s: {'met' if elapsed <= target else 'MISSED'}; same truths as "
            f"LatentClass: {(est.truths_ == plain.truths_).mean():.4f}, "
            f"max posterior diff {diff:.2e}"
        )


def paillier(args: argparse.Namespace) -> None:
    answers = privtd.datasets.load("duchenne").answers
    plain = privtd.inference.LatentClass().fit(answers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        for processes in (False, True) if args.processes else (False,):
            start = time.perf_counter()
            est = SecureEM(
                backend="paillier",
                processes=processes,
                key_bits=args.key_bits,
                test_only_short_keys=args.key_bits < 2048,
                max_iter=args.iters,
            ).fit(answers)
            elapsed = time.perf_counter() - start
            label = f"paillier {args.key_bits}-bit" + (
                ", one process per worker" if processes else ""
            )
            summary(label, est, elapsed)
            per_iter = est.rounds_[est.rounds_.phase == "em"].seconds.mean()
            print(
                f"  start round {est.rounds_.seconds.iloc[0]:.1f} s; to converge like LatentClass "
                f"({plain.n_iter_} iterations) would take about "
                f"{plain.n_iter_ * per_iter / 3600:.2f} h "
                "(extrapolated from the measured iterations)"
            )


def scale(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    settings = [(w, args.tasks[0]) for w in args.workers] + [
        (args.workers[0], t) for t in args.tasks[1:]
    ]
    print(f"{args.backend}: per EM iteration, {args.iters} iterations each, answers_per_task=5")
    print(
        "workers    tasks   wall_s  worker_s_max  worker_s_sum  requester_s  "
        "requester_MB  workers_MB  one_worker_receives_MB"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        for n_workers, n_tasks in settings:
            answers, _, _ = privtd.datasets.make_categorical(
                n_tasks, n_workers, 2, answers_per_task=min(5, n_workers), rng=rng
            )
            est = SecureEM(
                backend=args.backend,
                max_iter=args.iters,
                key_bits=args.key_bits,
                test_only_short_keys=args.key_bits < 2048,
                min_participants=3,
            ).fit(answers)
            em = est.rounds_[est.rounds_.phase == "em"]
            print(
                f"{n_workers:7d} {n_tasks:8d} {em.seconds.mean():8.3f} "
                f"{em.worker_seconds_max.mean():13.4f} "
                f"{em.worker_seconds_total.mean():13.3f} {em.requester_seconds.mean():12.4f} "
                f"{em.requester_bytes_sent.mean() / 1e6:13.3f} "
                f"{em.worker_bytes_sent.mean() / 1e6:11.3f} "
                f"{em.requester_bytes_sent.mean() / n_workers / 1e6:23.3f}",
                flush=True,
            )


def fraction_bits(args: argparse.Namespace) -> None:
    answers, truth = privtd.datasets.load("duchenne")
    plain = privtd.inference.LatentClass().fit(answers)
    gold = truth.index
    accuracy = (plain.truths_[gold] == truth).mean()
    print(f"plain LatentClass: {plain.n_iter_} iterations, accuracy {accuracy:.4f}")
    print("F   bound_per_sum  iterations  max_posterior_diff  same_truths  accuracy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privtd.ConvergenceWarning)
        for bits in args.bits:
            est = SecureEM(fraction_bits=bits).fit(answers)
            diff = np.abs(est.probas_.to_numpy() - plain.probas_.to_numpy()).max()
            print(
                f"{bits:2d} {privtd.secure.fixed_point.sum_error_bound(bits, 64):14.3g} "
                f"{est.n_iter_:11d} {diff:19.3g} {(est.truths_ == plain.truths_).mean():12.4f} "
                f"{(est.truths_[gold] == truth).mean():9.4f}",
                flush=True,
            )


def paillier_full(args: argparse.Namespace) -> None:
    """Paillier to convergence on whole datasets, one process per worker, against plain EM."""
    from privtd.experiments.dmkd14 import DATASETS, GAMMA, _plain, agreement

    for name in args.datasets:
        model, value_range = DATASETS[name]
        answers = privtd.datasets.load(name).answers
        plain = _plain(model, value_range).fit(answers)
        start = time.perf_counter()
        est = SecureEM(
            model,
            "paillier",
            processes=True,
            key_bits=args.key_bits,
            test_only_short_keys=args.key_bits < 2048,
            value_range=value_range,
            gamma=GAMMA,
        ).fit(answers)
        elapsed = time.perf_counter() - start
        same, diff = agreement(est, plain, model)
        summary(f"{name} ({model}), paillier {args.key_bits}-bit, processes", est, elapsed)
        print(
            f"  iterations {est.n_iter_} (plain {plain.n_iter_}), same truths {same:.4f}, "
            f"largest difference {diff:.2e}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("duchenne")
    p = sub.add_parser("paillier")
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--processes", action="store_true", help="Also run one process per worker.")
    full = sub.add_parser("paillier-full")
    full.add_argument("--datasets", nargs="+", default=["emotion", "dog", "duchenne"])
    full.add_argument("--key-bits", type=int, default=2048)
    f = sub.add_parser("fraction-bits")
    f.add_argument("--bits", type=int, nargs="+", default=[8, 12, 16, 24, 32, 40])
    s = sub.add_parser("scale")
    s.add_argument("--backend", default="masking", choices=["masking", "paillier"])
    s.add_argument("--workers", type=int, nargs="+", default=[16, 64, 256, 1024])
    s.add_argument("--tasks", type=int, nargs="+", default=[1000, 10_000, 100_000])
    s.add_argument("--iters", type=int, default=2)
    s.add_argument("--key-bits", type=int, default=2048)
    args = parser.parse_args()
    commands = {"duchenne": duchenne, "paillier": paillier, "scale": scale}
    commands["fraction-bits"] = fraction_bits
    commands["paillier-full"] = paillier_full
    commands[args.what](args)


if __name__ == "__main__":
    main()
