"""Lab 5's mutations: one or more per claim its notebook checks (``claims`` names them,
"05/<id>" as the ledger at the top of ``labs/05_local_sgd`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("05_local_sgd")
ACC = "lab_utils/labs/lab05_local_sgd/accelerate_runs.py"
STUDY = "lab_utils/labs/lab05_local_sgd/study.py"
T = "tests/labs/lab05_local_sgd/"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("lab 5 /= world", NB, "        p.data /= world   ", "        pass  # /= world",
             "average_parameters sums the ranks' parameters and never divides", (NB,), claims=("05/h1-ddp",)),
    Mutation("lab 5 average every step", NB,
             "        if (step + 1) % H == 0:                  # every H steps: average the parameters",
             "        if True:                                 # the H test forgotten: every step",
             "train_local averages after every step, whatever H", (NB,), claims=("05/bytes", "05/sync-pattern")),
    Mutation("lab 5 guide counts updates", NB,
             "                optimizer.zero_grad()\n                local_sgd.step()",
             "                optimizer.zero_grad()\n                if accelerator.sync_gradients:\n"
             "                    local_sgd.step()",
             "the lab's 'guide' loop is not the guide's: step() only after an update", (NB,),
             claims=("05/counting-trap",)),
    Mutation("lab 5 averaging per all-reduce", ACC, "for i in direct[::n_tensors]]", "for i in direct]",
             "the meter files every parameter all-reduce as one averaging, not one per n_tensors",
             (T + "test_accelerate_runs.py",), claims=("05/localsgd-block",)),
    Mutation("lab 5 outer gradient sign", NB, "                delta = a.detach() - p.data",
             "                delta = p.data - a.detach()",
             "train_diloco's outer gradient points the wrong way (mean(local) - anchor)", (NB,),
             claims=("05/diloco-plain",)),
    Mutation("lab 5 sign test higher wins", STUDY, "    wins = sum(x < y for x, y in zip(a, b))",
             "    wins = sum(x > y for x, y in zip(a, b))",
             "sign_test counts a higher loss as a win", (T + "test_study.py",),
             claims=("05/rarer-costs", "05/diloco-outer")),
    Mutation("lab 5 holm uncorrected", STUDY, "        if ps[i] > alpha / (len(ps) - rank):",
             "        if ps[i] > alpha:",
             "holm holds every p to alpha: no correction for the number of comparisons", (T + "test_diloco.py",),
             claims=("05/rarer-costs", "05/diloco-outer")),
    Mutation("lab 5 post-local first averaging", NB, "warmup_steps=warmup + H - 1))",
             "warmup_steps=warmup))",
             "the documented warmup_steps=start_localSGD_iter, unshifted: PyTorch averages after one local step,"
             " the hand loop after H", (NB,),
             claims=("05/post-local-torch",)),
    Mutation("lab 5 two-level no warm-up", NB, "subgroup=node, start_localSGD_iter=warmup)",
             "subgroup=node, start_localSGD_iter=0)",
             "the hook all-reduces inside the node from step 0: no synchronous warm-up", (NB,),
             claims=("05/two-level",)),
)  # fmt: skip
