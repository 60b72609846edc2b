"""Warm start for ``lab_utils.launch``: one process that has imported torch forks the ranks.

Importing torch costs each fresh rank 1-2 s of CPU, most of a small launch on a 2-core laptop.
``launch`` therefore starts this process once (per kernel or script, on first use; Linux only)
and asks it for ranks: it forks one child per rank, which takes the caller's environment, import
path and working folder from the request and then runs ``_worker.run_rank`` exactly as a rank
started from scratch does. Set ``LAB_UTILS_WARM_START=0`` to start every rank from scratch.

    python lab_utils/_zygote.py PARENT_PID      # started by launch(), not by hand

Protocol (one JSON line each way): a request ``{"workdir", "rank", "backend", "threads",
"timeout", "env", "path", "cwd", "preload"}`` is answered with the child's pid; this process first
imports the ``preload`` modules (heavy libraries the caller has imported, so its ranks will too),
once, so that no forked rank pays for them. When a child ends, the
exit code (negative: the signal) is written to ``<workdir>/rank<r>.exit``. Lifetimes chain:
this process dies with its parent and every child dies with this process (PR_SET_PDEATHSIG),
and each child leads its own process group, so ``launch`` can kill a rank with what it started.
Safe to fork: no thread has started and CUDA is not initialised here (only imports ran; torch,
torch._dynamo, transformers and accelerate start no thread on import, checked on torch 2.13).
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

    from lab_utils._worker import run_rank

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
