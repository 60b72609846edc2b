"""Lab 4, from the Hugging Face ``Trainer`` to an Accelerate loop: the lab's own code.

    from lab_utils.labs import lab04_hf as hf
    train_ds, val_ds = hf.data.make_splits(256, 128)
    with hf.trainer.TrainerMeter() as meter:               # meter a Trainer from outside
        t = train_with_trainer(...)

Each module is loaded on first use, so ranks import only what they need.
"""

from lab_utils.labs import lazy

__all__ = ["data", "trainer", "mechanics", "guards", "scripts", "figures", "exercises"]

__getattr__ = lazy(__name__, __all__)
