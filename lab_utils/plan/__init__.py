"""Plan your own run: the course's validated models applied to a model you bring.

    python -m lab_utils.plan --config llama-3.2-1b --batch 64 --seq 2048 --devices 8 --memory 80GB --link 100Gb
    python -m lab_utils.plan --config my_config.json --batch 64 --seq 2048 --devices 8 --memory 80GB \\
        --link 100Gb --dtype bf16 --optimizer adamw --tflops 400 --figure plan.html

    req = plan.request("llama-125m", batch=64, seq=1024, devices=8, memory="24GB", link="10Gb")
    plans = plan.rank(plan.candidates(*req))    # every strategy, cheapest that fits first
    print(plan.report.table(plans))

Every strategy the course taught (checkpointing variants, accumulation, DDP, ZeRO-1/2, FSDP, local
SGD, pipeline) gets a predicted peak memory per device and time per update; ``report.MODELS``
names the lab that validated each model and its measured error.
"""

from __future__ import annotations

from lab_utils.memory import stepmem
from lab_utils.plan import cost, inputs, report
from lab_utils.plan.cost import Memory, Plan, Strategy, evaluate
from lab_utils.plan.inputs import DEFAULT_TFLOPS, Hardware, model_fields, parse_link, parse_memory

__all__ = [
    "request",
    "candidates",
    "rank",
    "Strategy",
    "Plan",
    "Memory",
    "Hardware",
    "evaluate",
    "inputs",
    "cost",
    "report",
]

LOCAL_SGD_HANDICAP = 1.10  # local SGD ranks first only if >10 % faster: it changes convergence (lab 5)
OPTIMIZERS = stepmem.OPTIMIZERS


def request(
    config: str | dict,
    *,
    batch: int,
    seq: int,
    devices: int,
    memory: str | int,
    link: str = "100Gb",
    dtype: str | None = None,
    optimizer: str = "adamw",
    tflops: float | None = None,
    latency_us: float = 10.0,
) -> tuple[stepmem.Shape, Hardware]:
    """The model's shape at the global ``batch`` and the hardware, from what a person gives
    (a built-in name or a config file; sizes and links as strings). Bad values name their field.
    ``dtype`` None: bf16 for a Llama-style decoder, fp32 for GPT-2 and BERT (the ones modelled)."""
    if dtype is not None and dtype not in DEFAULT_TFLOPS:
        raise ValueError(f"--dtype {dtype!r}: choose bf16 (autocast, fp32 master weights) or fp32")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"--optimizer {optimizer!r}: choose one of {OPTIMIZERS}")
    for name, value in (("--batch", batch), ("--seq", seq), ("--devices", devices)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} {value!r}: give a whole number >= 1")
    if batch % devices:
        raise ValueError(
            f"--batch {batch} does not divide over --devices {devices}: each data-parallel device takes an equal "
            f"share; give a batch that is a multiple of {devices}"
        )
    fields = model_fields(config)
    dtype = dtype or ("bf16" if fields["arch"] == "llama" else "fp32")
    if dtype == "bf16" and fields["arch"] != "llama":
        raise ValueError(f"--dtype bf16 is modelled for Llama-style decoders; give --dtype fp32 for {fields['arch']}")
    if fields["arch"] != "llama" and seq > fields["positions"]:
        raise ValueError(f"--seq {seq}: longer than the model's {fields['positions']} learned positions")
    fields["positions"] = max(fields["positions"], seq)  # rotary: any length
    shape = stepmem.Shape(**fields, batch=batch, seq=seq, precision=dtype, optimizer=optimizer)
    size, note = parse_memory(memory)
    hw = Hardware(devices, size, parse_link(link, latency_us), tflops or DEFAULT_TFLOPS[dtype], memory_note=note)
    return shape, hw


def _divisors(n: int, limit: int = 64) -> list[int]:
    return [k for k in range(1, min(n, limit) + 1) if n % k == 0]


def candidates(shape: stepmem.Shape, hw: Hardware) -> list[Plan]:
    """Every strategy the course taught, each with every accumulation that divides the batch."""
    out = []
    per_device = shape.batch // hw.devices
    families = [("ddp", 1), ("ddp-every-step", 1), ("zero1", 1), ("zero2", 1), ("fsdp", 1)]
    families += [("local-sgd", h) for h in (8, 64)]  # H: updates between averages
    for ckpt in cost.CHECKPOINTING:
        for par, h in families:
            if hw.devices == 1 and par != "ddp":
                continue
            for k in _divisors(per_device):
                out.append(evaluate(shape, hw, Strategy(par, ckpt, k, h)))
        for p in _divisors(hw.devices)[1:]:
            d = hw.devices // p
            if shape.layers % p or shape.batch % d:
                continue
            for m in _divisors(shape.batch // d):
                out.append(evaluate(shape, hw, Strategy("pipeline", ckpt, m, 1, p)))
    return out


def rank(plans: list[Plan]) -> list[Plan]:
    """Plans that fit first, fastest first (local SGD with a 10 % handicap, a choice: it changes
    convergence); equal times go to the simpler plan (less recompute, fewer micro-batches, DDP
    before sharding). Plans that do not fit follow, smallest peak first."""

    def key(p: Plan) -> tuple:
        st = p.strategy
        handicap = LOCAL_SGD_HANDICAP if st.parallel == "local-sgd" else 1.0
        simpler = (cost.CHECKPOINTING.index(st.checkpointing), st.accumulation, cost.PARALLEL.index(st.parallel))
        return (not p.fits, p.seconds * handicap if p.fits else p.memory.peak, *simpler)

    return sorted(plans, key=key)
