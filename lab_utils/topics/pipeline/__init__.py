"""Lab 6 (pipelines, GPipe, on real ranks): its instruments, figures and exercise checks.

    from lab_utils import launch
    from lab_utils.topics import pipeline

    def gpipe_step(stage, inputs, targets): ...      # the lab's cell: one fill-drain step
    res = launch(pipeline.runs.measure, 2, args=(gpipe_step, pipeline.stages.Spec(), [1, 4]))
    pipeline.timeline.bubble([r["runs"][4]["events"][0] for r in res])   # measured idle fraction
    pipeline.figures.timeline([r["runs"][4]["events"][0] for r in res])
    pipeline.exercises.check_fill_drain(gpipe_step)

Modules (each loaded on first use, so ranks import only what they need):

- ``stages``: the model and data every run shares, ``split`` into stages (with boundaries), the
  shape check between stages, and the one-process large-batch reference;
- ``timeline``: ``Recorder`` (hooks on a stage: each forward and backward, and what it saves),
  the measured bubble and where its idle time went (``idle_split``), GPipe's formula;
- ``live``: the bytes held for backward as a schedule runs (the Recorder's meter), and their peak;
- ``traffic``: ``counter`` (a ``CommCounter`` of every send and receive between stages, its bytes and when it was
  posted and waited on, any loop or schedule) and modelled link times for the pipeline and DDP;
- ``runs``: the rank-side harness (``measure``, ``measure_interleaved``: they record the step
  functions and stage wrappers the lab's cells define), DDP's bytes for the same model;
- ``watch``: ``naming_stages()``, which turns a hang's timeout into an error naming the stage,
  the message it waits for and what to change;
- ``figures``: the lab's plotly figures;
- ``exercises``: the graders of the lab's exercises.
"""

from lab_utils.topics import lazy

__all__ = ["exercises", "figures", "live", "runs", "stages", "timeline", "traffic", "watch"]

__getattr__ = lazy(__name__, __all__)
