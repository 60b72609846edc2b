"""Lab 0 (setup check): its figure and its exercise checks.

    from lab_utils.topics.setup import exercises, figures
    figures.allreduce({2: [3.0, 3.0], 3: [6.0, 6.0, 6.0]})   # what each rank got from all_reduce
    exercises.check_mean(mean_across_ranks)                 # grades a rank function on real ranks

Modules: ``figures`` (the all-reduce bar chart), ``exercises`` (graders of the three rank
functions the student writes: an average, a broadcast, a gather).
"""

from lab_utils.topics import lazy

__all__ = ["exercises", "figures"]

__getattr__ = lazy(__name__, __all__)
