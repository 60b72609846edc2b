"""Warm start for ``lab_utils.launch``: one process that has imported torch forks the ranks.

    python lab_utils/launcher/_zygote.py PARENT_PID      # started by launch(), not by hand

Importing torch costs each fresh rank 1-2 s of CPU. A request (one JSON line: ``workdir, rank,
backend, threads, timeout, env, path, cwd, preload``) is answered with the forked child's pid; the
child takes the caller's environment, path and folder and runs ``_worker.run_rank``. Its exit code
(negative: the signal) goes to ``<workdir>/rank<r>.exit``. This process dies with its parent and
each child with it (PR_SET_PDEATHSIG); each child leads its own process group. Safe to fork: only
imports ran here (torch, transformers and accelerate start no thread on import; torch 2.13).
"""

import ctypes
import importlib
import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Get SIGKILL when the parent process goes away (Linux); exit now if it already has."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(3)


def exit_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"rank{rank}.exit")


def serve(parent_pid: int) -> None:
    die_with_parent(parent_pid)
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # as in _rank.py: lab_utils' modules must not shadow top-level ones
    import cloudpickle  # noqa: F401 - imported before forking, so no rank pays for it
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - DDP's constructor and an optimizer's first step import it (2-4 s)
    import torch.distributed  # noqa: F401

    from lab_utils.launcher._worker import run_rank

    children: dict[int, tuple[str, int]] = {}

    def reap(*_: object) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            workdir, rank = children.pop(pid, ("", -1))
            if workdir:
                try:
                    with open(exit_path(workdir, rank), "w") as f:
                        f.write(str(os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass  # the launch already finished and removed its folder

    signal.signal(signal.SIGCHLD, reap)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the caller, which stops the ranks
    me = os.getpid()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        for name in req.get("preload", ()):
            importlib.import_module(name)  # before the fork: a no-op once imported
        # Hold SIGCHLD until the child is registered: a rank that ends at once must be reaped
        # with its workdir known.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:  # the rank
            try:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                os.setpgid(0, 0)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                die_with_parent(me)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(2, 1)  # the rank's prints go where the caller's errors go, never into the pipe
                os.environ.clear()
                os.environ.update(req["env"])
                sys.path[:] = req["path"]
                os.chdir(req["cwd"])
                run_rank(req["workdir"], req["backend"], req["threads"], req["timeout"])
            finally:
                os._exit(1)
        children[pid] = (req["workdir"], req["rank"])
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        out.write(f"{pid}\n")
        out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
