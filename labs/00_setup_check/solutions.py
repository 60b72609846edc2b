# %% [markdown]
# Solutions to the exercises of `labs/00_setup_check/00_setup_check.ipynb`, for instructors.
#
# One source: the lab's exercise cells are these cells with each `### BEGIN SOLUTION` ...
# `### END SOLUTION` region replaced by a stub (`python -m tools.solutions sync`).
# `make solutions` writes the lab with these answers filled in to `build/solutions/`.

# %% exercise="setup-mean"
def mean_across_ranks(x):
    """Every rank calls this with its own tensor x; return the element-wise mean over all ranks."""
    ### BEGIN SOLUTION
    dist.all_reduce(x)  # a SUM, in place, on every rank
    return x / dist.get_world_size()
    ### END SOLUTION


# %% exercise="setup-broadcast"
def agree_on_seed(my_seed):
    """Every rank proposes its own my_seed; return rank 0's, so that all ranks use the same one."""
    ### BEGIN SOLUTION
    t = torch.tensor([my_seed])
    dist.broadcast(t, src=0)  # rank 0 sends, the others receive into t
    return int(t.item())
    ### END SOLUTION


# %% exercise="setup-gather"
def who_is_there(me):
    """Every rank passes a small dict `me`; return the list of every rank's dict, in rank order."""
    ### BEGIN SOLUTION
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, me)
    return everyone
    ### END SOLUTION
