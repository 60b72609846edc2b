"""Lab 8's mutations: one or more per claim its notebook checks (``claims`` names them,
"08/<id>" as the ledger at the top of ``labs/08_plan_your_run`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation

CLAIMS = "tests/labs/lab08_capstone/test_claims.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("llama k/v as wide as q", "lab_utils/memory/llama.py", "attention = (2 + 2 * r) * u * c",
             "attention = 4 * u * c", "the calculator keeps k and v as wide as q: it ignores grouped-query attention",
             (CLAIMS, "-k", "real_llama_step"), claims=("08/activations-1pct",)),
    Mutation("no autocast copies", "lab_utils/memory/llama.py", "    copies = autocast_weight_copies(s)\n",
             "    copies = 0\n", "the calculator forgets the bf16 weight copies backward keeps under autocast",
             (CLAIMS, "-k", "real_llama_step"), claims=("08/activations-1pct",)),
    Mutation("one loss gradient", "lab_utils/memory/llama.py",
             "logits = 2 * b * s.seq * s.vocab * 4 if loss else 0", "logits = b * s.seq * s.vocab * 4 if loss else 0",
             "the loss's backward charged one fp32 logits-sized gradient, not two",
             (CLAIMS, "-k", "real_llama_step or under_each_reserved"), claims=("08/peak-5pct", "08/under-reserved")),
    Mutation("zero layout = autocast", "lab_utils/plan/cost.py", '"zero": (2, 2, 12),', '"zero": (4, 4, 8),',
             "ZeRO's paper layout taken to be autocast's 4 + 4 + 8 (fp32 weights and gradients outside the optimizer)",
             (CLAIMS, "-k", "figure_1"), claims=("08/zero-figure-1",)),
    Mutation("VmRSS for VmHWM", "lab_utils/labs/lab08_capstone/measure.py", 'hwm=_vm("VmHWM")', 'hwm=_vm("VmRSS")',
             "the process's peak read as its resident memory after the step, not its high-water mark",
             (CLAIMS, "-k", "fresh_process"), claims=("08/vmhwm-5pct",)),
    Mutation("fsdp as zero2", "lab_utils/plan/cost.py", 'stage = {"zero1": 1, "zero2": 2, "fsdp": 3}',
             'stage = {"zero1": 1, "zero2": 2, "fsdp": 2}', "FSDP's plan leaves the weights unsharded (ZeRO-2's bytes)",
             (CLAIMS, "-k", "drop_from_8 or under_each_reserved"), claims=("08/state-drop", "08/under-reserved")),
    Mutation("fsdp forgets the root", "lab_utils/plan/cost.py", "return (root + head_grad + 3 * layer) * s.dtype_bytes",
             "return (head_grad + 3 * layer) * s.dtype_bytes",
             "FSDP's gathered bytes leave out the root's parameters (embedding, final norm, head), held all backward",
             (CLAIMS, "-k", "under_each_reserved"), claims=("08/under-reserved",)),
    Mutation("policy saves every mm", "lab_utils/labs/lab08_capstone/published.py",
             "saved = u + u * r + u * s.ffn_size / s.hidden + u",
             "saved = 3 * u + 2 * u * r + 2 * u * s.ffn_size / s.hidden",
             "torchtitan's op policy read as saving all seven matmuls' outputs, not every other one",
             (CLAIMS, "-k", "under_each_reserved"), claims=("08/under-reserved",)),
)  # fmt: skip
