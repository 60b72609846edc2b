"""Lab 4, from the Hugging Face ``Trainer`` to an Accelerate loop: the lab's topic code.

    from lab_utils.topics import hf
    train_ds, val_ds = hf.data.make_splits(256, 128)       # the job: data, model, metrics
    with hf.trainer.TrainerMeter() as meter:               # meter a Trainer from outside
        t = train_with_trainer(...)                        # (the Trainer setup is a lab cell)
    with accelerate_meter.LoopMeter() as m:                # meter an Accelerate loop from outside
        out = accelerate_loop(...)                         # (lab_utils.accelerate_meter; the loop is a lab cell)
    launch(accelerate_meter.metered(accelerate_loop), world_size=2, kwargs=job)
    hf.figures.sync_timeline(ranks[0])
    hf.exercises.check_loop_from_args(loop_from_args)

Modules, one concept each (each loaded on first use, so ranks import only what they need):

- ``data``: the classification job (splits that record their read order, tiny GPT-2, accuracy/F1).
- ``names``: the talk's transformers 4.x names and their 5.x replacements.
- ``trainer``: ``TrainerMeter`` (micro-batch losses, from outside), ``summary`` of a run's log,
  ``window_means`` (what the Trainer logs per update) and ``loss_gap``.
- ``mechanics``: Accelerate's pieces measured alone (backward's division inside and outside
  accumulate, token-count normalisation).
- ``guards``: the launch traps (an Accelerator in the kernel, a taken port, one process only).
- ``scripts``: the job as ``accelerate launch`` / ``torchrun`` commands, and running them.
- ``figures``: the lab's plotly figures; ``exercises``: the graders.
"""

from lab_utils.topics import lazy

__all__ = ["data", "names", "trainer", "mechanics", "guards", "scripts", "figures", "exercises"]

__getattr__ = lazy(__name__, __all__)
