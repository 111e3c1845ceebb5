"""Recovering a worker who lost its token: the recovery code shown at enrolment, and the limit
on wrong guesses.

A recovery code is 256 random bits, kept as its SHA-256 hash in the worker's row. Redeeming it
(``POST /campaigns/ID/recovery``) gives a fresh token for that same row, so the same name, the
same reports and the same ``spent_epsilon``: recovery never gives a fresh budget. The code is
then replaced by a new one (returned with the token): a code works once, and the token it
replaced stops working.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

#: Wrong recovery codes one client address may send per window before it is refused (429).
MAX_FAILURES = 10
#: The window, in seconds.
WINDOW_S = 60.0
#: Addresses remembered at most: past it, the oldest are forgotten first (memory stays bounded
#: whatever addresses a flood of requests claims).
MAX_CLIENTS = 10_000


class FailureLimit:
    """Counts failed attempts per client address in a sliding window (in this process only:
    each server process keeps its own count)."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: it may now)."""
        now = self._clock()
        with self._lock:
            seen = self._failures.get(client)
            if seen is None:
                return 0.0
            while seen and seen[0] <= now - self.window_s:
                seen.popleft()
            if not seen:
                del self._failures[client]
                return 0.0
            if len(seen) < self.max_failures:
                return 0.0
            return max(seen[0] + self.window_s - now, 0.0)

    def fail(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            seen = self._failures.pop(client, None) or deque()
            seen.append(now)
            while len(seen) > self.max_failures:
                seen.popleft()
            self._failures[client] = seen  # re-inserted: the dict keeps addresses by recency
            while len(self._failures) > MAX_CLIENTS:
                del self._failures[next(iter(self._failures))]
