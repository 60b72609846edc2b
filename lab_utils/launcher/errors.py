"""What ``lab_utils.launch`` raises once the ranks have started: which rank, and why.

    from lab_utils.launcher.errors import RankError
    try:
        launch(train, 2)
    except RankError as err:          # a rank raised: its own traceback comes back
        print(err.rank, err.exc_type, err.remote_traceback)

``RankDiedError``: a rank ended without a result (killed, out of memory, ``os._exit``);
``LaunchTimeout``: the ranks did not finish in time (a hang, or too much work). All three are
``LaunchError``s, and by then every rank has been stopped.
"""

from __future__ import annotations

import signal

__all__ = ["LaunchError", "RankError", "RankDiedError", "LaunchTimeout"]


class LaunchError(RuntimeError):
    """Base class of every error ``launch`` raises after the workers have started."""


class RankError(LaunchError):
    """A rank raised an exception. ``rank`` and ``remote_traceback`` say where and why."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str):
        self.rank, self.exc_type, self.remote_traceback = rank, exc_type, remote_traceback
        super().__init__(
            f"rank {rank} raised {exc_type}: {message}\n\n--- traceback from rank {rank} ---\n{remote_traceback}"
        )


class RankDiedError(LaunchError):
    """A rank's process ended without returning (killed, crashed, or called ``os._exit``)."""

    def __init__(self, rank: int, exitcode: int | None):
        self.rank, self.exitcode = rank, exitcode
        how = (
            f"was killed by signal {signal.Signals(-exitcode).name}"
            if exitcode and exitcode < 0
            else f"exited with code {exitcode}"
        )
        super().__init__(
            f"rank {rank} {how} before returning a result. If it ran out of memory, "
            f"try a smaller model or fewer ranks; the other ranks were stopped."
        )


class LaunchTimeout(LaunchError):
    """The ranks did not all finish within ``timeout`` seconds (a hang, or too much work)."""
