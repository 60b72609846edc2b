"""Lab 6's mutations: one or more per claim its notebook checks (``claims`` names them,
"06/<id>" as the ledger at the top of ``labs/06_pipeline_gpipe`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("06_pipeline_gpipe")
TIMELINE = "tests/labs/lab06_pipeline/test_timeline.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("loss not over m", NB, "losses.append(F.mse_loss(stage(a), t) / m)",
             "losses.append(F.mse_loss(stage(a), t))",
             "the last stage's loss not divided by m: the sum of the micro-batches' means, m times the gradient",
             (NB,), claims=("06/accumulation",)),
    Mutation("bubble formula", "lab_utils/labs/lab06_pipeline/timeline.py", "return (p - 1) / (m + p - 1)",
             "return (p - 1) / m", "GPipe's bubble as (p-1)/m instead of (p-1)/(m+p-1)",
             (TIMELINE,), claims=("06/bubble-split",)),
    Mutation("bubble split", "lab_utils/labs/lab06_pipeline/timeline.py",
             "return Idle(formula(p, m), (p - 1) * (2 * t_f + t_b) / (2 * step))",
             "return Idle(formula(p, m), formula(p, m))",
             "the whole of GPipe's bubble counted as blocked in a receive (no tail after the last send)",
             (TIMELINE,), claims=("06/bubble-split",)),
    Mutation("schedule tail", "lab_utils/labs/lab06_pipeline/timeline.py",
             "before_last = sum(max(e.end for e in ev) - t0 - busy_seconds(ev) for ev in stages)",
             "before_last = sum(t1 - t0 - busy_seconds(ev) for ev in stages)",
             "a stage's idle time after its last piece counted as waiting in a receive",
             (TIMELINE,), claims=("06/bubble-split",)),
    Mutation("stage 0 input gradient", "lab_utils/labs/lab06_pipeline/stages.py",
             "xi = x.detach().clone().requires_grad_(s > 0)", "xi = x.detach().clone().requires_grad_()",
             "stage 0's input counted as needing a gradient, as every later stage's: the stages look equal",
             ("tests/labs/lab06_pipeline/test_stages.py", "-k", "piece_flops"), claims=("06/imbalance",)),
    Mutation("1F1B warm-up", "lab_utils/labs/lab06_pipeline/timeline.py", "warm = min(m, p - stage)",
             "warm = min(m, p - stage - 1)",
             "1F1B's expected warm-up one forward short (p - s - 1 forwards, then a backward)",
             (TIMELINE, "-k", "order_1f1b"), claims=("06/held-in-flight",)),
    Mutation("live bytes never freed", "lab_utils/labs/lab06_pipeline/live.py", "self.now -= ref[1]",
             "self.now -= 0", "the live meter never subtracts what autograd frees: a peak that only grows",
             (TIMELINE, "-k", "live_bytes"), claims=("06/held-in-flight",)),
    Mutation("stage not checkpointed", NB, "return checkpoint(self.stage, x, use_reentrant=False)",
             "return self.stage(x)", "the Checkpointed wrapper calls its stage directly: every activation kept",
             (NB,), claims=("06/recompute",)),
    Mutation("scale_grads off", NB, "sched = schedule(pstage, n_microbatches=m, loss_fn=loss_fn)",
             "sched = schedule(pstage, n_microbatches=m, loss_fn=loss_fn, scale_grads=False)",
             "torch's schedules told not to divide by m: the plain-mean loss gives m times the gradient",
             (NB,), claims=("06/torch-schedules", "06/scale-grads")),
    Mutation("hang names the next message", "lab_utils/labs/lab06_pipeline/watch.py",
             "index = _count(s, op, peer) - 1", "index = _count(s, op, peer)",
             "the stuck message numbered one past the one the stage waits for",
             ("tests/labs/lab06_pipeline/test_watch.py",), claims=("06/hang-named",)),
)  # fmt: skip
