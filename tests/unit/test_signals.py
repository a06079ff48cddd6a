"""common/signals.py: a stop signal is handled on a thread, so it never re-enters a lock the main thread holds."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading
    from common.signals import SignalWatcher

    stop = threading.Event()
    if sys.argv[1] == "watcher":
        watcher = SignalWatcher(lambda signum: stop.set())
    else:  # what pd-server's main did: set the Event inside the handler
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    with stop._cond:  # the main thread holds the Event's lock, as Event.wait() does on its way in and out
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # bytecodes: the handler runs here, in this thread
            pass
    sys.exit(0 if stop.wait(5) else 3)
    """
)


def _run(mode: str, timeout: float) -> int | None:
    try:
        done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], timeout=timeout, capture_output=True, check=False)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode


def test_sigterm_while_the_main_thread_holds_the_event_lock_is_handled() -> None:
    assert _run("watcher", 30) == 0


def test_the_same_sigterm_deadlocks_a_handler_that_sets_the_event() -> None:
    # the hazard the watcher removes is real: the handler re-enters the Event's plain Lock and hangs for good
    assert _run("handler", 5) is None


def test_close_puts_the_previous_handler_back_and_a_later_signal_reaches_it() -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys, threading
        from common.signals import SignalWatcher

        got = []
        seen = threading.Event()
        signal.signal(signal.SIGUSR1, lambda signum, frame: got.append("previous"))
        watcher = SignalWatcher(lambda signum: (got.append(signum), seen.set()), signals=(signal.SIGUSR1,))
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen.wait(5), "the watcher's thread never saw the signal"
        watcher.close()
        watcher.close()  # idempotent
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(10_000):
            pass
        sys.exit(0 if got == [signal.SIGUSR1, "previous"] else 3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
