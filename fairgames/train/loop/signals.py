"""Stopping at a step boundary: while the training loop runs, SIGINT and SIGTERM are recorded
by :class:`StopSignals` instead of ending the process, and the loop reads the flag between
steps (no host-device sync); :class:`~fairgames.train.loop.engine.RunInterrupted` is what it
raises then, after a checkpoint at that step. After the last step (the final evaluation and
the report) there is no boundary to wait for: :func:`stop_at_once` raises at the signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


class StopSignals:
    """While active (a context manager), SIGINT and SIGTERM are recorded in ``received``
    instead of stopping the process, so that a loop can stop at its next step boundary; a
    second signal raises ``KeyboardInterrupt`` at once. Outside the main thread (where Python
    cannot set handlers) it does nothing.

    Example:
        >>> import os
        >>> with StopSignals() as signals:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     got = signals.received
        >>> got == signal.SIGTERM
        True
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def start(self) -> StopSignals:
        """Record the signals from now on (the ``with`` statement calls it)."""
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def stop(self) -> None:
        """Restore the handlers that were there before :meth:`start`."""
        for s, handler in self._previous.items():
            # None: a handler not set from Python; the default is the closest
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def __enter__(self) -> StopSignals:
        return self.start()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def stop_at_once(interrupt: Callable[[int], BaseException]) -> Iterator[None]:
    """While active, SIGINT and SIGTERM raise ``interrupt(signum)`` at once (a signal no
    longer ends the process without a word, as SIGTERM's default does); a second signal, while
    ``interrupt`` runs (it may write a checkpoint), takes the default action. Outside the main
    thread it does nothing.

    Example:
        >>> import os
        >>> try:
        ...     with stop_at_once(lambda s: RuntimeError(signal.Signals(s).name)):
        ...         os.kill(os.getpid(), signal.SIGTERM)
        ... except RuntimeError as e:
        ...     print(e)
        SIGTERM
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise interrupt(signum)

    previous = {s: signal.signal(s, handle) for s in StopSignals.SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
