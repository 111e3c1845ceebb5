"""Secure sum by Paillier encryption (P2's own choice, with one key holder;
docs/algorithms.md#paillier).

One worker, the key holder, makes a Paillier key pair and sends the public key to the requester,
which relays it. Every worker encrypts its fixed-point codes under it; the requester multiplies
the ciphertexts (adding the plaintexts), adds an encryption of a random ``r`` that only it knows,
and asks the key holder to decrypt. The key holder sees ``sum + r mod n``, uniform and useless to
it; the requester removes ``r``. The requester never holds the private key; the key holder never
sees a worker's ciphertext. Secure while the two do not collude.

Packing: a plaintext holds several codes in slots of ``b + h`` bits (rounded up to whole bytes),
where ``b`` bits hold one code of the model's largest contribution and the ``h`` headroom bits
take the carries of a sum over all workers: 36 slots per 2048-bit plaintext for 64 workers.
Each code is stored as ``code + 2**(b-1)``, so slots never go negative; after decryption each
slot is checked against what a sum of in-range codes can reach, so a worker that overflowed its
slot voids the round (a spill small enough to stay in range is caught only by the model's own
range checks on the sums).

Every primitive comes from ``phe`` (python-paillier; ``pip install 'privtd[secure]'``, with
gmpy2 for speed): key generation, ``raw_encrypt``, ciphertext addition, ``raw_decrypt``.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from ..errors import ProtocolError
from . import messages

#: Key length in bits: 2048 is the smallest modulus still recommended (NIST SP 800-57).
KEY_BITS = 2048
_TOP = np.uint64(1 << 63)


def _phe() -> Any:
    try:
        import phe
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "The Paillier secure sum needs phe: pip install 'privtd[secure]'."
        ) from None
    return phe


class Packing:
    """How codes are laid out in plaintexts: ``n_parties`` summands of ``value_bits`` each
    under modulus ``n``. A slot takes whole bytes, at most 62 bits."""

    def __init__(self, n: int, n_parties: int, value_bits: int) -> None:
        slot_bits = value_bits + max(1, n_parties.bit_length())
        if slot_bits > 62:
            raise ProtocolError(
                f"Slots of {slot_bits} bits do not fit the 62-bit limit; lower fraction_bits."
            )
        self.n_parties = n_parties
        self.offset = 1 << (value_bits - 1)
        self.slot_bytes = -(-slot_bits // 8)
        self.slots = (n.bit_length() - 2) // (8 * self.slot_bytes)
        if self.slots < 1:
            raise ProtocolError(
                f"A {n.bit_length()}-bit Paillier key is too short to hold one slot."
            )
        self.plain_bytes = self.slots * self.slot_bytes

    def n_plaintexts(self, n_values: int) -> int:
        return -(-n_values // self.slots)

    def pack(self, codes: np.ndarray) -> list[int]:
        shifted = codes.view(np.int64) + self.offset
        if shifted.min() < 0 or shifted.max() >= 2 * self.offset:
            raise ProtocolError("A code is wider than the agreed slot; it cannot be packed.")
        n_pt = self.n_plaintexts(codes.size)
        grid = np.zeros((n_pt * self.slots, 8), dtype=np.uint8)
        grid[: codes.size] = shifted.astype("<i8").view(np.uint8).reshape(-1, 8)
        rows = np.ascontiguousarray(grid[:, : self.slot_bytes]).reshape(n_pt, self.plain_bytes)
        return [int.from_bytes(row.tobytes(), "little") for row in rows]

    def unpack(self, plaintexts: list[int], n_values: int, n_summands: int) -> np.ndarray:
        """The summed codes (as ``uint64``) from decrypted plaintexts of ``n_summands`` workers."""
        raw = b"".join(p.to_bytes(self.plain_bytes, "little") for p in plaintexts)
        grid = np.zeros((len(plaintexts) * self.slots, 8), dtype=np.uint8)
        grid[:, : self.slot_bytes] = np.frombuffer(raw, dtype=np.uint8).reshape(-1, self.slot_bytes)
        slots = grid[:n_values].copy().view("<i8").ravel()
        # Each slot holds sum(code + offset); a value past what in-range codes can reach means
        # a worker's plaintext spilled over its slot.
        if slots.min() < 0 or slots.max() > n_summands * (2 * self.offset - 1):
            raise ProtocolError(
                "A decrypted slot is out of range: some worker's ciphertext held codes outside "
                "the agreed slots. The round is void."
            )
        return (slots - n_summands * self.offset).view(np.uint64)


def value_bits(fraction_bits: int, max_abs: float) -> int:
    """Bits of one signed code for contributions up to ``max_abs`` (with a bit to spare)."""
    return fraction_bits + max(0, int(np.ceil(np.log2(max_abs + 1.0)))) + 2


class PaillierWorker:
    """A worker's side: encrypt packed codes; the key holder also decrypts blinded aggregates."""

    name = "paillier"

    def __init__(
        self,
        worker_id: int,
        min_participants: int = 3,
        key_bits: int = KEY_BITS,
        *,
        test_only_short_keys: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.min_participants = min_participants
        self.key_bits = key_bits
        self.test_only_short_keys = test_only_short_keys
        self._public: Any = None
        self._private: Any = None
        self._packing: Packing | None = None

    def setup(self, message: messages.Message) -> messages.Message:
        phe = _phe()
        if messages.field(message, "key_holder", bool):
            bits = messages.field(message, "key_bits", int)
            self._refuse_short(bits)
            self._public, self._private = phe.generate_paillier_keypair(n_length=bits)
            return {"paillier_n": _int_bytes(self._public.n)}
        return {}

    def set_keys(self, message: messages.Message) -> None:
        phe = _phe()
        n = int.from_bytes(messages.field(message, "paillier_n", bytes), "big")
        self._refuse_short(n.bit_length())
        if self._private is None:
            self._public = phe.PaillierPublicKey(n)
        self._packing = Packing(
            n, messages.field(message, "n_parties", int), messages.field(message, "value_bits", int)
        )

    def _refuse_short(self, bits: int) -> None:
        if bits < KEY_BITS and not self.test_only_short_keys:
            raise ProtocolError(
                f"Worker {self.worker_id} refuses a {bits}-bit Paillier key: keys under "
                f"{KEY_BITS} bits can be factored, revealing every contribution."
            )

    def protect(
        self,
        codes: np.ndarray,
        round_: int,
        attempt: int,
        participants: list[int],
        phase: int = 0,
        context: bytes = b"",
    ) -> messages.Message:
        # ``context`` (the request's digest) binds masking's masks; Paillier has none to bind,
        # so a requester that sends one worker other posteriors is not detected here
        # (docs/secure.md, "Known limits").
        del context
        if self._packing is None:
            raise ProtocolError("A round came before the Paillier key was set.")
        if len(participants) < self.min_participants:
            raise ProtocolError(
                f"Only {len(participants)} worker(s) in round {round_}; at least "
                f"{self.min_participants} are needed, or the sum would reveal too much."
            )
        public = self._public
        ciphers = [public.raw_encrypt(m) for m in self._packing.pack(codes)]
        return {"ciphertexts": _ints_array(ciphers, _ct_bytes(public.n))}

    def decrypt(self, message: messages.Message) -> messages.Message:
        if self._private is None:
            raise ProtocolError(f"Worker {self.worker_id} holds no Paillier private key.")
        n = self._public.n
        ints = _array_ints(messages.field(message, "ciphertexts", np.ndarray), _ct_bytes(n), n * n)
        plain = [self._private.raw_decrypt(c) for c in ints]
        return {"plaintexts": _ints_array(plain, _ct_bytes(n))}


class PaillierAggregator:
    """The requester's side: relay the public key, add ciphertexts, blind, have them decrypted."""

    name = "paillier"

    def __init__(self, key_bits: int = KEY_BITS, value_bits: int = 64) -> None:
        self.key_bits = key_bits
        self.value_bits = value_bits
        self.key_holder: int | None = None
        self._public: Any = None
        self.n_parties = 0

    def setup_fields(self, worker: int) -> messages.Message:
        if self.key_holder is None:
            self.key_holder = worker
        return {"key_holder": worker == self.key_holder, "key_bits": self.key_bits}

    def keys_message(self, replies: dict[int, messages.Message]) -> messages.Message:
        phe = _phe()
        assert self.key_holder is not None
        if self.key_holder not in replies:
            raise ProtocolError(f"The key holder, worker {self.key_holder}, did not answer setup.")
        raw = messages.field(replies[self.key_holder], "paillier_n", bytes)
        self._public = phe.PaillierPublicKey(int.from_bytes(raw, "big"))
        self.n_parties = len(replies)
        return {"paillier_n": raw, "n_parties": self.n_parties, "value_bits": self.value_bits}

    def combine(
        self, replies: dict[int, messages.Message], n_values: int, decrypt: Any
    ) -> np.ndarray:
        phe = _phe()
        public = self._public
        packing = Packing(public.n, self.n_parties, self.value_bits)
        n_ct = packing.n_plaintexts(n_values)
        nsq = public.nsquare
        total: list[Any] | None = None
        for worker, reply in replies.items():
            try:
                ints = _array_ints(
                    messages.field(reply, "ciphertexts", np.ndarray), _ct_bytes(public.n), nsq
                )
            except ProtocolError as exc:
                raise ProtocolError(f"Worker {worker}: {exc}") from None
            if len(ints) != n_ct:
                raise ProtocolError(
                    f"Worker {worker} sent {len(ints)} ciphertexts; expected {n_ct}."
                )
            numbers = [phe.EncryptedNumber(public, c, 0) for c in ints]
            total = (
                numbers if total is None else [a + b for a, b in zip(total, numbers, strict=True)]
            )
        assert total is not None
        blinds = [secrets.randbelow(public.n) for _ in range(n_ct)]
        blinded = [
            t + phe.EncryptedNumber(public, public.raw_encrypt(r), 0)
            for t, r in zip(total, blinds, strict=True)
        ]
        reply = decrypt(
            {
                "type": "decrypt",
                "ciphertexts": _ints_array(
                    [b.ciphertext(be_secure=False) for b in blinded], _ct_bytes(public.n)
                ),
            }
        )
        plain = _array_ints(
            messages.field(reply, "plaintexts", np.ndarray), _ct_bytes(public.n), public.n, lowest=0
        )
        if len(plain) != n_ct:
            raise ProtocolError(
                f"The key holder returned {len(plain)} plaintexts; expected {n_ct}."
            )
        sums = [(p - r) % public.n for p, r in zip(plain, blinds, strict=True)]
        return packing.unpack(sums, n_values, len(replies))


def _ct_bytes(n: int) -> int:
    return (2 * n.bit_length() + 7) // 8


def _int_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _ints_array(values: list[int], width: int) -> np.ndarray:
    raw = b"".join(v.to_bytes(width, "big") for v in values)
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(values), width)


def _array_ints(array: np.ndarray, width: int, limit: int, lowest: int = 1) -> list[int]:
    if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != width:
        raise ProtocolError(
            f"Expected rows of {width} bytes of ciphertext; got {array.dtype} {array.shape}."
        )
    ints = [int.from_bytes(row.tobytes(), "big") for row in array]
    if any(not lowest <= v < limit for v in ints):
        raise ProtocolError("A ciphertext or plaintext is outside the key's range.")
    return ints
