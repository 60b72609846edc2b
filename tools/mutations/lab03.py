"""Lab 3's mutations: one or more per claim its notebook checks (``claims`` names them,
"03/<id>" as the ledger at the top of ``labs/03_ddp_no_sync`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("03_ddp_no_sync")
LAB = "lab_utils/labs/lab03_ddp"
TESTS = "tests/labs/lab03_ddp"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("lab 3 / k", NB, "loss = F.mse_loss(ddp_model(x), y) / k        # outside",
             "loss = F.mse_loss(ddp_model(x), y)        # outside", "no_sync_update's last micro-step without / k",
             (NB,), claims=("03/large-batch",)),
    Mutation("lab 3 forward outside", NB,
             "        with ddp_model.no_sync():                 # forward AND backward inside\n"
             "            loss = F.mse_loss(ddp_model(x), y) / k\n",
             "        loss = F.mse_loss(ddp_model(x), y) / k\n"
             "        with ddp_model.no_sync():                 # forward AND backward inside\n",
             "no_sync_update with the forward outside the context (only the backward inside)",
             (NB,), claims=("03/one-allreduce",)),
    Mutation("lab 3 probe flag", f"{LAB}/reducer.py",
             "        with ddp.no_sync() if fwd_in else nullcontext():\n"
             "            flag_fwd = ddp.require_backward_grad_sync\n",
             "        flag_fwd = ddp.require_backward_grad_sync\n"
             "        with ddp.no_sync() if fwd_in else nullcontext():\n",
             "the probe reads the flag before entering the forward's no_sync context",
             (f"{TESTS}/test_reducer.py::test_reducer_flags_around_no_sync",), claims=("03/forward-decides",)),
    Mutation("lab 3 bucket closes", f"{LAB}/buckets.py", "        if current >= limit:",
             "        if current > limit:", "a bucket closes only once it holds MORE than its cap",
             (f"{TESTS}/test_buckets.py::test_predict_by_hand",), claims=("03/greedy-buckets",)),
    Mutation("lab 3 error sign", f"{LAB}/reallink.py", "        return self.model_s / self.measured_s - 1",
             "        return self.measured_s / self.model_s - 1",
             "the model's error as measured / model - 1: a model that predicts too little reads as too high",
             (f"{TESTS}/test_reallink.py::test_error_is_the_models_signed_error",), claims=("03/model-low",)),
    Mutation("lab 3 ring 2(p-1)", "lab_utils/netmodel.py", "+ 2 * (p - 1) / p * nbytes / link.bandwidth_Bps",
             "+ 2 * (p - 1) * nbytes / link.bandwidth_Bps",
             "ring all-reduce's bandwidth term 2(p-1) n / beta, the / p dropped: twice the bytes at p = 2",
             (NB,), claims=("03/model-low",)),
    Mutation("lab 3 debug INFO", NB, 'os.environ.update(TORCH_DISTRIBUTED_DEBUG="DETAIL", LAB_UTILS_WARM_START="0")',
             'os.environ.update(TORCH_DISTRIBUTED_DEBUG="INFO", LAB_UTILS_WARM_START="0")',
             "TORCH_DISTRIBUTED_DEBUG=INFO, which logs but does not compare collectives",
             (NB,), claims=("03/debug-detail",)),
    Mutation("lab 3 bucket view flag", f"{LAB}/settings.py",
             "    ddp = wrap(model(setup), cap_mb, gradient_as_bucket_view=flag)",
             "    ddp = wrap(model(setup), cap_mb)", "step_memory never passes the flag to DDP",
             (f"{TESTS}/test_settings.py::test_bucket_views_save_one_gradient_copy_counted_by_the_allocator",),
             claims=("03/bucket-view",)),
    Mutation("lab 3 reentrant case", NB, '"use_reentrant=False": (False, {})', '"use_reentrant=False": (True, {})',
             "the use_reentrant=False case built with reentrant checkpointing",
             (NB,), claims=("03/reentrant-fix",)),
)  # fmt: skip
