"""Secure sum by pairwise masks (Bonawitz et al., CCS 2017, without recovery;
docs/algorithms.md#masking).

Each worker has an X25519 key pair (long-term where it keeps a
:class:`~privtd.secure.history.WorkerHistory`: its identity) and sends the public half, with a
fresh nonce, to the requester, which relays every public key and nonce to every worker: workers
never talk to each other. Each pair ``(u, v)`` then shares a secret (X25519), stretched by
HKDF-SHA256 (salt: the session id and the pair's nonces, so pair keys are new in every run) into
a ChaCha20 key. In a round, worker ``u``
adds to its fixed-point codes the keystream of every pair ``(u, v)`` with ``u < v`` and subtracts
it for ``u > v``, modulo ``2**64``. Every mask appears once with each sign, so the requester's sum
of the masked vectors is the sum of the codes, and each masked vector alone is uniform on
``[0, 2**64)`` to anyone who lacks the pair keys.

Verifiable sums: every worker also authenticates its masked vector to every other worker, with
an HMAC-SHA256 tag under a key derived from their pair key (so the requester, which relays the
public keys but never learns a pair key, cannot forge a tag), over the session, the round, the
participants, the request and the vector's SHA-256. The requester forwards every participant's
masked vector of a round, with the tags, to every worker; each checks that it holds exactly one
vector from every participant, each bearing that participant's tag for it, and adds them
itself. The masks cancel only over that full set, so a worker ends with the true sums, from
which it computes the next posteriors itself (``privtd.secure.parties.Worker``): the requester
can neither alter a sum nor hand the workers a state of its own.

Drop-outs: a worker that does not answer voids the round, and by default ends the run (a sum
over fewer workers would reveal the missing one's contribution; ``docs/secure.md``). Where the
requester is allowed to retry without that worker, it does so under a new attempt number, so
every attempt uses fresh masks (a nonce is never reused under a key). Nothing is ever revealed
to rebuild a missing mask. Workers refuse to mask for fewer
than ``min_participants`` workers, and refuse to mask twice for one (round, attempt).

All primitives come from ``cryptography`` (``pip install 'privtd[secure]'``).
"""

from __future__ import annotations

import hashlib
import os
import struct
from hmac import compare_digest as hmac_compare
from typing import Any

import numpy as np

from ..errors import ProtocolError
from . import messages

KEY_BYTES = 32
TAG_BYTES = 32


try:
    from cryptography.hazmat.primitives import hashes, hmac, serialization
    from cryptography.hazmat.primitives.asymmetric import x25519
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    HAVE_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover - the extra is installed in tests
    HAVE_CRYPTOGRAPHY = False


def _require() -> None:
    if not HAVE_CRYPTOGRAPHY:
        raise ImportError(
            "The masking secure sum needs cryptography: pip install 'privtd[secure]'."
        )


class MaskingWorker:
    """A worker's side: its X25519 key pair, its pair keys, and the masking of its codes."""

    name = "masking"

    def __init__(self, worker_id: int, min_participants: int = 3, private_key: Any = None) -> None:
        _require()
        self.worker_id = worker_id
        self.min_participants = min_participants
        # A long-term key (the worker's identity, privtd.secure.WorkerHistory) binds the list of
        # participants to the masks: a listed worker that does not take part leaves its masks
        # uncancelled. Pair keys stay fresh per run through each worker's own nonce.
        self._static = private_key is not None
        self._private = x25519.X25519PrivateKey.generate() if private_key is None else private_key
        self._nonce = os.urandom(16)
        self._pair_keys: dict[int, bytes] = {}
        self._used: set[tuple[int, int, int]] = set()
        self._session = b""
        self._tag_keys: dict[int, bytes] = {}
        #: What this worker last tagged: (phase, round, attempt, participants, context, digest).
        self._last: tuple[int, int, int, tuple[int, ...], bytes, bytes] | None = None

    @property
    def public_key(self) -> bytes:
        raw: bytes = self._private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return raw

    def setup(self, message: messages.Message) -> messages.Message:
        self._session = messages.field(message, "session", bytes)
        return {"public_key": self.public_key, "nonce": self._nonce}

    def set_keys(self, message: messages.Message) -> None:
        owners = messages.field(message, "key_owners", list)
        keys = messages.field(message, "public_keys", np.ndarray)
        if keys.dtype != np.uint8 or keys.shape != (len(owners), KEY_BYTES):
            raise ProtocolError(f"Expected {len(owners)} public keys of {KEY_BYTES} bytes each.")
        nonces: dict[int, bytes] = {}
        if "nonces" in message or self._static:
            # With a long-term key, the nonces are what makes this run's pair keys new: a worker
            # never masks under the pair keys of an earlier run.
            raw_nonces = messages.field(message, "nonces", np.ndarray)
            if raw_nonces.dtype != np.uint8 or raw_nonces.shape != (len(owners), 16):
                raise ProtocolError(f"Expected {len(owners)} nonces of 16 bytes each.")
            nonces = {int(o): n.tobytes() for o, n in zip(owners, raw_nonces, strict=True)}
            if nonces.get(self.worker_id) != self._nonce:
                raise ProtocolError("The nonce relayed for this worker is not the one it sent.")
        for owner, raw in zip(owners, keys, strict=True):
            if owner == self.worker_id:
                if raw.tobytes() != self.public_key:
                    raise ProtocolError("The key relayed for this worker is not its own.")
                continue
            try:
                peer = x25519.X25519PublicKey.from_public_bytes(raw.tobytes())
                shared = self._private.exchange(peer)
            except ValueError as exc:
                raise ProtocolError(
                    f"The public key relayed for worker {owner} is invalid: {exc}"
                ) from None
            low, high = sorted((int(owner), self.worker_id))
            salt = self._session + nonces.get(low, b"") + nonces.get(high, b"")
            self._pair_keys[int(owner)] = HKDF(
                algorithm=hashes.SHA256(),
                length=KEY_BYTES,
                salt=salt,
                info=b"privtd pairwise mask %d %d" % (low, high),
            ).derive(shared)
            self._tag_keys[int(owner)] = HKDF(
                algorithm=hashes.SHA256(),
                length=KEY_BYTES,
                salt=salt,
                info=b"privtd contribution tag %d %d" % (low, high),
            ).derive(shared)

    def protect(
        self,
        codes: np.ndarray,
        round_: int,
        attempt: int,
        participants: list[int],
        phase: int = 0,
        context: bytes = b"",
    ) -> messages.Message:
        """The masked codes for this (phase, round, attempt) among ``participants``; ``phase``
        is 1 for the count round, 0 for the others. ``context`` (the SHA-256 of the round's
        request as this worker received it) is bound into every mask: the masks cancel only if
        every participant received the same request, so a requester that sends one worker
        other posteriors than the rest gets a uniformly random sum, not that worker's
        contribution (``benchmarks/attacks/attack_split_state.py``)."""
        if (phase, round_, attempt) in self._used:
            raise ProtocolError(
                f"Round {round_} attempt {attempt} was already masked; refusing to reuse its masks."
            )
        if len(participants) < self.min_participants:
            raise ProtocolError(
                f"Only {len(participants)} worker(s) in round {round_}; masking needs at least "
                f"{self.min_participants}, or the sum would reveal too much about each of them."
            )
        missing = [v for v in participants if v != self.worker_id and v not in self._pair_keys]
        if missing:
            raise ProtocolError(
                f"No pair key with worker(s) {missing[:5]}: they were not at setup."
            )
        self._used.add((phase, round_, attempt))
        masked = codes.astype(np.uint64, copy=True)
        for peer in participants:
            if peer == self.worker_id:
                continue
            mask = self._mask(peer, round_, attempt, phase, masked.size, context)
            if self.worker_id < peer:
                masked += mask
            else:
                masked -= mask
        digest = hashlib.sha256(masked.astype("<u8", copy=False).data).digest()
        self._last = (phase, round_, attempt, tuple(participants), context, digest)
        covered = self._covered(*self._last)
        # One tag for every participant, in their sorted order (none for itself).
        tags = np.zeros((len(participants), TAG_BYTES), dtype=np.uint8)
        for row, peer in enumerate(sorted(participants)):
            if peer != self.worker_id:
                tags[row] = np.frombuffer(_tag(self._tag_keys[peer], covered), dtype=np.uint8)
        return {"masked": masked, "tags": tags}

    def _covered(
        self,
        phase: int,
        round_: int,
        attempt: int,
        participants: tuple[int, ...],
        context: bytes,
        digest: bytes,
    ) -> bytes:
        """What a tag covers: the run (session), the round, the participants, the request as
        the sender received it, and the masked vector's SHA-256."""
        return b"".join(
            [
                b"privtd masked contribution",
                self._session,
                struct.pack("<IIII", phase, round_, attempt, len(participants)),
                np.asarray(participants, dtype="<i8").tobytes(),
                context,
                digest,
            ]
        )

    def verified_sum(self, message: messages.Message) -> np.ndarray:
        """The sum of the codes of the round this worker last contributed to, from every
        participant's masked vector as the requester forwards them, with their tags.

        Refuses unless there is exactly one vector per participant of that round, in the
        participants' order, each bearing that participant's tag for this worker for this very
        round and request (checked against this worker's own round context: a participant that
        received another request tagged another context). Each participant tags one vector per
        round, so the set, and its sum, is the same for every worker; the masks cancel only
        over the full set, so a vector left out or replaced makes the sum noise."""
        if self._last is None:
            raise ProtocolError("Contributions were forwarded before this worker sent any.")
        phase, round_, attempt, participants, context, own = self._last
        masked = messages.field(message, "forward_masked", np.ndarray)
        tags = messages.field(message, "forward_tags", np.ndarray)
        order = sorted(participants)
        n = len(order)
        if (
            masked.dtype != np.uint64
            or masked.ndim != 2
            or masked.shape[0] != n
            or tags.dtype != np.uint8
            or tags.shape != (n, n, TAG_BYTES)
        ):
            raise ProtocolError(
                f"Expected the {n} participants' tagged contributions of round {round_}, one "
                "each, in the participants' order."
            )
        me = order.index(self.worker_id)
        for row, owner in enumerate(order):
            digest = hashlib.sha256(np.ascontiguousarray(masked[row], dtype="<u8").data).digest()
            if owner == self.worker_id:
                if digest != own:
                    raise ProtocolError("This worker's own contribution was forwarded altered.")
                continue
            expected = _tag(
                self._tag_keys[owner],
                self._covered(phase, round_, attempt, participants, context, digest),
            )
            if not hmac_compare(expected, tags[row, me].tobytes()):
                raise ProtocolError(
                    f"The contribution forwarded for worker {owner} in round {round_} does not "
                    "carry its tag for this round: the sums cannot be verified, and this "
                    "worker computes on no state it cannot check."
                )
        total: np.ndarray = masked.sum(axis=0, dtype=np.uint64)
        return total

    def _mask(
        self, peer: int, round_: int, attempt: int, phase: int, n: int, context: bytes = b""
    ) -> np.ndarray:
        # ChaCha20 takes a 4-byte block counter and a 12-byte nonce: (round, attempt, phase) is
        # unique per key, so no keystream is ever used twice. The round's key is the pair key
        # keyed with the request's digest (HMAC-SHA256), so both workers of a pair derive the
        # same mask only if they received the same request.
        key = self._pair_keys[peer]
        if context:
            mac = hmac.HMAC(key, hashes.SHA256())
            mac.update(context)
            key = mac.finalize()
        nonce = struct.pack("<IIII", 0, round_, attempt, phase)
        stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        return np.frombuffer(stream.update(_zeros(8 * n)), dtype="<u8")


def _tag(key: bytes, data: bytes) -> bytes:
    mac = hmac.HMAC(key, hashes.SHA256())
    mac.update(data)
    tag: bytes = mac.finalize()
    return tag


_ZEROS = bytes(0)


def _zeros(n: int) -> bytes:
    """``n`` zero bytes to encrypt into keystream, allocated once per size."""
    global _ZEROS
    if len(_ZEROS) != n:
        _ZEROS = bytes(n)
    return _ZEROS


class MaskingAggregator:
    """The requester's side: relay public keys, then add masked vectors modulo ``2**64``."""

    name = "masking"

    def __init__(self) -> None:
        self.session = os.urandom(16)
        self._forward: messages.Message = {}

    def setup_fields(self, worker: int) -> messages.Message:
        return {"session": self.session}

    def keys_message(self, replies: dict[int, messages.Message]) -> messages.Message:
        owners = sorted(replies)
        keys = np.zeros((len(owners), KEY_BYTES), dtype=np.uint8)
        nonces = np.zeros((len(owners), 16), dtype=np.uint8)
        for row, owner in enumerate(owners):
            raw = messages.field(replies[owner], "public_key", bytes)
            nonce = messages.field(replies[owner], "nonce", bytes)
            if len(raw) != KEY_BYTES or len(nonce) != 16:
                raise ProtocolError(
                    f"Worker {owner} sent a public key of {len(raw)} bytes and a nonce of "
                    f"{len(nonce)}, not {KEY_BYTES} and 16."
                )
            keys[row] = np.frombuffer(raw, dtype=np.uint8)
            nonces[row] = np.frombuffer(nonce, dtype=np.uint8)
        return {"key_owners": owners, "public_keys": keys, "nonces": nonces}

    def combine(
        self, replies: dict[int, messages.Message], n_values: int, decrypt: Any
    ) -> np.ndarray:
        owners = sorted(replies)
        n = len(owners)
        masked = np.zeros((n, n_values), dtype=np.uint64)
        tags = np.zeros((n, n, TAG_BYTES), dtype=np.uint8)
        for row, worker in enumerate(owners):
            try:
                masked[row] = messages.array(replies[worker], "masked", "uint64", (n_values,))
                tags[row] = messages.array(replies[worker], "tags", "uint8", (n, TAG_BYTES))
            except ProtocolError as exc:
                raise ProtocolError(f"Worker {worker}: {exc}") from None
        # Kept for the workers, who check the tags and add the vectors themselves.
        self._forward = {"forward_masked": masked, "forward_tags": tags}
        total: np.ndarray = masked.sum(axis=0, dtype=np.uint64)
        return total

    def forward(self) -> messages.Message:
        """The last combined round's tagged masked vectors, for every worker to verify."""
        return self._forward
