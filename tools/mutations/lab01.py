"""Lab 1's mutations: one or more per claim its notebook checks (``claims`` names them,
"01/<id>" as the ledger at the top of ``labs/01_gradient_checkpointing`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("01_gradient_checkpointing")
PLANNER = "lab_utils/labs/lab01_checkpointing/planner.py"
EVERY_BLOCK = "        h = checkpoint(blk, h, use_reentrant=False)\n    return h\n\n\ndef forward_segments"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("ckpt region", NB, "C = checkpoint(self.region, x, use_reentrant=False)", "C = self.region(x)",
             "the A + B = C region run as usual, never under checkpoint", (NB,), claims=("01/region-recompute",)),
    Mutation("ckpt policy op", NB, "if op == torch.ops.aten.mm.default:", "if op == torch.ops.aten.addmm.default:",
             "the policy saves addmm's output, but a Linear without bias runs aten.mm", (NB,),
             claims=("01/keep-matmul",)),
    Mutation("ckpt policy saves all", NB, "return CheckpointPolicy.PREFER_RECOMPUTE     # tanh, +: cheap",
             "return CheckpointPolicy.MUST_SAVE            # tanh, +: cheap",
             "the policy MUST_SAVEs every op: no extra matmul, but A, B and h kept too", (NB,),
             claims=("01/keep-matmul",)),
    Mutation("plan kept", PLANNER, "kept += inp[s]", "kept += act[s]",
             "a checkpointed segment counted as keeping its first block's activations, not its input",
             ("tests/labs/lab01_checkpointing/test_planner.py",), claims=("01/plan-as-counted",)),
    Mutation("segments swapped", NB,
             'h = part(h) if mode == "store" else checkpoint(part, h, use_reentrant=False)',
             'h = checkpoint(part, h, use_reentrant=False) if mode == "store" else part(h)',
             "forward_segments checkpoints the stored segments and stores the checkpointed ones",
             (NB,), claims=("01/plan-as-counted",)),
    Mutation("planner", PLANNER, "alive = k + seg_act + _out(inp, i)",
             "alive = k + inp[j] + _out(inp, i)", "a rebuilt segment's peak counted without its recomputed activations",
             ("tests/labs/lab01_checkpointing/test_planner.py",), claims=("01/position-aware",)),
    Mutation("plan in flight", NB, "fit = planner.plan_for_budget(act, inp, cost, budget, in_flight=IN_FLIGHT)",
             "fit = planner.plan_for_budget(act, inp, cost, budget)",
             "the second plan made without the bytes in flight at the backward's start", (NB,),
             claims=("01/position-aware",)),
    Mutation("reentrant blocks", NB, EVERY_BLOCK, EVERY_BLOCK.replace("use_reentrant=False", "use_reentrant=True"),
             "every block checkpointed with the reentrant variant, which replays whole blocks", (NB,),
             claims=("01/early-stop",)),
    Mutation("no early stop", NB, EVERY_BLOCK,
             EVERY_BLOCK.replace("        h = checkpoint(blk, h, use_reentrant=False)",
                                 "        with torch.utils.checkpoint.set_checkpoint_early_stop(False):\n"
                                 "            h = checkpoint(blk, h, use_reentrant=False)"),
             "every block checkpointed with early stop turned off (set_checkpoint_early_stop(False))", (NB,),
             claims=("01/early-stop",)),
    Mutation("partial no early stop", NB, EVERY_BLOCK,
             EVERY_BLOCK.replace("        h = checkpoint(blk, h, use_reentrant=False)",
                                 "        with torch.utils.checkpoint.set_checkpoint_early_stop(False):\n"
                                 "            h = blk(h) if blk is blocks[0] else "
                                 "checkpoint(blk, h, use_reentrant=False)"),
             "blocks after the first checkpointed with early stop off: less than one forward, for other reasons",
             (NB,), claims=("01/early-stop",)),
    Mutation("core reentrant", NB, "checkpoint(attention_core, q, k, v, mask, use_reentrant=False)",
             "checkpoint(attention_core, q, k, v, mask, use_reentrant=True)",
             "the attention core checkpointed reentrant: both bmm's replayed", (NB,), claims=("01/attention-core",)),
    Mutation("hf eval mode", NB, "n_positions=HT, seed=0).to(DEV).train()", "n_positions=HT, seed=0).to(DEV).eval()",
             "the model left in eval mode, where transformers does not checkpoint", (NB,), claims=("01/hf-switch",)),
    Mutation("trap flag", NB, "checkpoint(blocks[0], x, use_reentrant=reentrant)",
             "checkpoint(blocks[0], x, use_reentrant=False)", "the trap demo runs non-reentrant both times", (NB,),
             claims=("01/reentrant-trap",)),
    Mutation("calculator micro", NB, "seq=AT, accumulation=accumulation,", "seq=AT, accumulation=1,",
             "the calculator told the whole batch, not the micro-batch", (NB,), claims=("01/step-calculator",)),
    Mutation("rng state", NB, "use_reentrant=False, preserve_rng_state=preserve)",
             "use_reentrant=False, preserve_rng_state=True)", "the demo never turns preserve_rng_state off", (NB,),
             claims=("01/side-effects",)),
)  # fmt: skip
