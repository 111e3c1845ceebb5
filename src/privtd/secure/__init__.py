"""The worker-private latent class protocol of P2 (Kajino et al., DMKD 2014): EM in which the
requester learns the truths but never a worker's labels or quality.

Workers keep their answers and their own model parameters; the requester receives only secure
sums, by pairwise masks (:mod:`~privtd.secure.masking`, default) or Paillier encryption
(:mod:`~privtd.secure.paillier`). Threat model and costs: ``docs/secure.md``.
Needs ``pip install 'privtd[secure]'``.
"""

from .campaign import Campaign
from .history import WorkerHistory
from .models import MODELS, ModelSpec
from .parties import (
    BACKENDS,
    MIN_ANSWERS,
    DropoutError,
    Requester,
    RoundStats,
    SecureRun,
    Transport,
    Worker,
)
from .secure_em import SecureEM, split_by_worker
from .transport import InProcessTransport, SocketTransport

__all__ = [
    "BACKENDS",
    "MIN_ANSWERS",
    "Campaign",
    "DropoutError",
    "MODELS",
    "InProcessTransport",
    "ModelSpec",
    "Requester",
    "RoundStats",
    "SecureEM",
    "SecureRun",
    "SocketTransport",
    "Transport",
    "Worker",
    "WorkerHistory",
    "split_by_worker",
]
