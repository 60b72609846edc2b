"""Lab 3 (DDP ``no_sync``): the instruments of its runs, its figures and its exercise checks.

    from lab_utils import launch
    from lab_utils.topics import ddp

    def no_sync_update(ddp_model, optimizer, micro_batches): ...   # the lab's cells hold the loops
    res = launch(ddp.workload.train, 2, args=(no_sync_update, 4))   # counted on 2 real ranks
    ddp.figures.comm({"no_sync": res[0]})
    ddp.exercises.check_accumulate(train_accumulating)

Modules (each loaded on first use, so ranks import only what they need):

- ``workload``: the model, data, micro-batches and large-batch reference every run shares, and
  ``train``, which runs an update function under DDP with a counting comm hook attached;
- ``reducer``: ``probe`` observes DDP's flags and reducer calls around ``no_sync()``;
- ``buckets``: all-reduces per backward for several ``bucket_cap_mb``, and the greedy prediction;
- ``emulate``: ``LinkHook``, a comm hook that stamps bucket-ready times and queues each bucket on
  an emulated link (one thread per rank), so the wall clock includes the link;
- ``sweep``: stamped micro-steps, the overlap model on modelled links, and a demo on an emulated link, per K;
- ``reallink``: the same model against a real shaped link (network namespaces, veth, tc tbf; root),
  with the contention measured; ``make validate-link`` writes the table the lab shows;
- ``stamps``: ``UpdateStamps``, a comm hook and hooks that stamp where one real update's time
  goes (compute, each bucket's all-reduce, the optimizer step); ``breakdown`` splits the
  real-link validation's updates into those terms, measured and modelled;
- ``viewmem``: what ``gradient_as_bucket_view=True`` saves, counted by the allocator in one update;
- ``script_exercise``: the last exercise, the student's own DDP script run under ``torchrun``;
- ``settings``: DDP's settings measured (first buckets, unused-parameter search, gradients as
  bucket views, compression hooks, the buffer broadcast of ``require_forward_param_sync``);
- ``calculator``: "your setup", time per update with and without ``no_sync`` for a described job;
- ``figures``: the lab's plotly figures and its link explorer;
- ``exercises``: the graders of the lab's exercises.
"""

from lab_utils.topics import lazy

__all__ = [
    "breakdown",
    "buckets",
    "calculator",
    "emulate",
    "exercises",
    "figures",
    "reallink",
    "reducer",
    "script_exercise",
    "settings",
    "stamps",
    "sweep",
    "viewmem",
    "workload",
]

__getattr__ = lazy(__name__, __all__)
