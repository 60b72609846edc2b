"""Each lab's topic code, one package per lab: its measurements, its figures and its exercise checks.

    from lab_utils.topics import checkpointing      # lab 1
    from lab_utils.topics import accumulation       # lab 2
    from lab_utils.topics import ddp                # lab 3
    from lab_utils.topics import hf                 # lab 4 (Trainer -> Accelerate)
    from lab_utils.topics import local_sgd          # lab 5
    from lab_utils.topics import pipeline           # lab 6 (pipelines, GPipe)
    from lab_utils.topics import fsdp               # lab 7 (FSDP2, accumulation, checkpointing)
    from lab_utils.topics import setup              # lab 0

The instruments every lab shares (launching ranks, counting collectives, simulated links, memory
and recompute meters, timing, tiny models and data, checks) stay one level up in ``lab_utils``.
A topic package may import those instruments, never another topic: each lab stands alone.
"""
