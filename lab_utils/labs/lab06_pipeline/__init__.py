"""Lab 6 (pipelines, GPipe, on real ranks): its instruments, figures and exercise checks.

    from lab_utils import launch
    from lab_utils.labs import lab06_pipeline as pipeline

    def gpipe_step(stage, inputs, targets): ...      # the lab's cell: one fill-drain step
    res = launch(pipeline.runs.measure, 2, args=(gpipe_step, pipeline.stages.Spec(), [1, 4]))
    pipeline.timeline.bubble([r.runs[4].events[0] for r in res])   # measured idle fraction
    pipeline.exercises.check_fill_drain(gpipe_step)

Modules load on first use, so ranks import only what they run (never ``figures``).
"""

from lab_utils.labs import lazy

__all__ = ["exercises", "figures", "live", "records", "runs", "stages", "timeline", "traffic", "watch"]

__getattr__ = lazy(__name__, __all__)
