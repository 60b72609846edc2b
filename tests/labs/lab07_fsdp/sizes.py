"""The small model lab 7's instrument tests shard on 2 real ranks, and its bytes by hand:
2 blocks Linear(8, 8) in float64 are 2 x (64 + 8) x 8 = 1152 bytes, 576 per rank."""

WIDTH, DEPTH, K = 8, 2, 3
PARAM_BYTES = DEPTH * (WIDTH * WIDTH + WIDTH) * 8
