"""Entry point of one rank started by ``lab_utils.launch`` (not meant to be run by hand).

It is started as a script (``python .../lab_utils/launcher/_rank.py``), not with ``-m``, so that the
parent-death watch is armed before anything heavy is imported: importing torch takes seconds,
and a kernel killed in those seconds must not leave this process behind.
"""

import os
import signal
import sys
import threading
import time


def _watch_parent(parent_pid: int) -> None:
    """Exit if the launching process goes away (a killed kernel must not leave orphans)."""
    try:  # Linux: the kernel sends us SIGKILL when our parent dies.
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere the polling thread below still works
        pass

    def poll() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(3)
            time.sleep(0.5)

    if os.getppid() != parent_pid:  # the parent died before the watch was armed
        os._exit(3)
    threading.Thread(target=poll, daemon=True).start()


if __name__ == "__main__":
    _watch_parent(int(sys.argv[5]))
    # Run as a script, this folder is sys.path[0]: drop it, or lab_utils' own modules
    # (data, env, run, ...) would shadow top-level modules of the same names.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    from lab_utils.launcher._worker import run_rank

    run_rank(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
