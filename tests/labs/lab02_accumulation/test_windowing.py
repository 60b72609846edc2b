"""Windows of K micro-batches, update counts, and a window concatenated into one batch."""

import pytest
import torch

from lab_utils.labs.lab02_accumulation import concat_batches, num_updates, window_sizes, windows


def test_windows_sizes_and_update_counts():
    assert window_sizes(10, 4) == [4, 4, 2]
    assert window_sizes(10, 4, drop_last=True) == [4, 4]
    assert window_sizes(8, 4) == [4, 4]
    assert windows(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert num_updates(10, 4) == 3
    assert num_updates(10, 4, drop_last=True) == 2
    assert num_updates(10, 4, epochs=3) == 9
    assert num_updates(50, 8, epochs=3) == 21
    with pytest.raises(ValueError, match="k=0"):
        windows([1, 2], 0)
    with pytest.raises(ValueError, match="n_micro_batches"):
        window_sizes(-1, 2)


def test_concat_batches_tuple_and_dict():
    a, b = (torch.zeros(2, 3), torch.ones(2)), (torch.ones(1, 3), torch.zeros(1))
    x, y = concat_batches([a, b])
    assert x.shape == (3, 3) and y.tolist() == [1.0, 1.0, 0.0]
    d = concat_batches([{"u": torch.zeros(2, 4)}, {"u": torch.ones(3, 4)}])
    assert d["u"].shape == (5, 4)
    with pytest.raises(ValueError, match="pad"):
        concat_batches([{"u": torch.zeros(2, 4)}, {"u": torch.ones(3, 5)}])
    with pytest.raises(ValueError, match="no batches"):
        concat_batches([])
