"""The small model lab 3's instrument tests run on 2 real ranks, and its sizes by hand."""

from lab_utils.labs.lab03_ddp import workload

# A small model whose sizes are easy to add up by hand:
# Linear(8, 64): 2048 + 256 B; 2 x Linear(64, 64): 16384 + 256 B each; Linear(64, 1): 256 + 4 B.
SMALL = workload.Setup(dim=8, width=64, depth=2, micro_batch=4)
PARAM_BYTES = (8 * 64 + 64 + 2 * (64 * 64 + 64) + 64 + 1) * 4
CAP = 16384 / 2**20  # one block's weight: every weight closes a bucket
BY_HAND = [4 + 256 + 256 + 16384, 256 + 16384, 256 + 2048]  # gradients in reverse order
# A cap the running total hits exactly (4 + 256 + 256 = 516 B): a bucket closes AT its cap, so the
# first one ends there; were it to close only above the cap, it would run on to 16,900 B.
EXACT_CAP = 516 / 2**20  # DDP: int(bucket_cap_mb * 2**20) = 516 bytes
EXACT_BY_HAND = [4 + 256 + 256, 16384, 256 + 16384, 256 + 2048]
K = 3
