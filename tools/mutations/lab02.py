"""Lab 2's mutations: one or more per claim its notebook checks (``claims`` names them,
"02/<id>" as the ledger at the top of ``labs/02_gradient_accumulation`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("02_gradient_accumulation")

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("summed loss", "lab_utils/labs/lab02_accumulation/losses.py", ".flatten(1).mean(1).sum()",
             ".flatten(1).mean(1).mean()", "mse_sum returns the batch's mean, not its sum over samples",
             ("tests/labs/lab02_accumulation/test_losses.py",), claims=("02/float64-equal",)),
    Mutation("lab 2 / K", NB, "loss = F.mse_loss(model(xb), yb) / K   #",
             "loss = F.mse_loss(model(xb), yb)   #", "plain_loop without / K: .grad holds K times the mean",
             (NB,), claims=("02/float64-equal",)),
    Mutation("lab 2 no accumulation", NB,
             "scaled_loss(model, mb, window).backward()         # adds into .grad\n            optimizer.step()",
             "scaled_loss(model, mb, window).backward()         # adds into .grad\n                optimizer.step()",
             "accumulate steps after every micro-batch: a forgotten / K no longer multiplies the step",
             (NB,), claims=("02/adam-hides-k",)),
    Mutation("lab 2 eval mode lost", NB, "    a.train(train_mode), b.train(train_mode)\n", "",
             "distance_to_large_batch never switches the copies to eval mode: frozen BatchNorm trains",
             (NB,), claims=("02/batchnorm",)),
    Mutation("lab 2 micro tokens", NB,
             "n_window = torch.tensor(sum(accumulation.count_tokens(m) for m in window))",
             "n_window = torch.tensor(accumulation.count_tokens(mb))",
             "num_items_in_batch counts the micro-batch's tokens, not the window's",
             (NB,), claims=("02/num-items",)),
    Mutation("lab 2 short window / K", NB, "accumulation.count_items(mb) / len(window)",
             "accumulation.count_items(mb) / K", "the short last window divided by K, not by its real size",
             (NB,), claims=("02/short-window",)),
    Mutation("lab 2 sched in micro", NB,
             "total_updates = accumulation.num_updates(len(micro_batches), K, epochs=EPOCHS)",
             "total_updates = len(micro_batches) * EPOCHS",
             "the schedule sized in micro-batches, not in optimizer updates",
             (NB,), claims=("02/scheduler-per-update",)),
    Mutation("lab 2 clip per micro", NB,
             "backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # the window's",
             "backward()\n            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # the window's",
             "accumulate_clip_per_window clips after every backward(), inside the window",
             (NB,), claims=("02/clip-once",)),
    Mutation("lab 2 scaler update", NB,
             "backward()\n        scaler.step(optimizer)    # unscales",
             "backward()\n            scaler.update()\n        scaler.step(optimizer)    # unscales",
             "accumulate_scaled updates the scale after every micro-batch",
             (NB,), claims=("02/scaler-once",)),
    Mutation("lab 2 bf16 buffer", NB, "buffers = [torch.zeros_like(p, dtype=buffer_dtype) for p in params]",
             "buffers = [torch.zeros_like(p) for p in params]",
             "the float32 arm's buffer made with zeros_like(p): bf16, like the parameter",
             (NB,), claims=("02/fp32-buffer",)),
)  # fmt: skip
