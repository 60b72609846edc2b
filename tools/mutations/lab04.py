"""Lab 4's mutations: one or more per claim its notebook checks (``claims`` names them,
"04/<id>" as the ledger at the top of ``labs/04_trainer_to_accelerator`` lists them)."""

from __future__ import annotations

from tools.mutations.mutation import Mutation, notebook

NB = notebook("04_trainer_to_accelerator")
METER = "tests/core/test_accelerate_meter.py"  # runs the notebook's own loops (tests/helpers/lab04_cells.py)

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("lab 4 loop no /K", NB,
             "                accelerator.backward(loss)\n                if accelerator.sync_gradients:",
             "                loss.backward()\n                if accelerator.sync_gradients:",
             "the Accelerate loop calls loss.backward(): nothing divides by the accumulation steps",
             (METER, "-k", "trainer_and_accelerate_loop_agree"), claims=("04/loop-equals-trainer",)),
    Mutation("lab 4 loop sampler", NB,
             "DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed))\n"
             "    hf.guards.check_processes(accelerator, expected_processes)   # section 6",
             "DataLoaderConfiguration(use_seedable_sampler=False, data_seed=seed))\n"
             "    hf.guards.check_processes(accelerator, expected_processes)   # section 6",
             "the Accelerate loop shuffles without the Trainer's seedable sampler",
             (METER, "-k", "trainer_and_accelerate_loop_agree"), claims=("04/loop-equals-trainer",)),
    Mutation("lab 4 forward outside", NB,
             "            with contextlib.nullcontext() if sync else accelerator.no_sync(model):"
             "   # forward AND backward\n                loss = model(**batch).loss\n",
             "            loss = model(**batch).loss\n"
             "            with contextlib.nullcontext() if sync else accelerator.no_sync(model):\n",
             "the hand loop runs the forward outside no_sync(): DDP all-reduces on every backward",
             (METER, "-k", "two_ranks"), claims=("04/hand-loop",)),
    Mutation("lab 4 SGD clipped", NB, 'optim="sgd", max_grad_norm=0.0,', 'optim="sgd",',
             "the plain-SGD runs keep the Trainer's clipping at 1.0, which rescales the 4x gradient away",
             (NB,), claims=("04/trainer-guess",)),
    Mutation("lab 4 kwargs too late", NB,
             "        if accepts_loss_kwargs is not None:       # section 4: read once, when the Trainer is built\n"
             "            model.accepts_loss_kwargs = accepts_loss_kwargs\n"
             "        trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,\n"
             "                          compute_metrics=hf.data.compute_metrics)\n",
             "        trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,\n"
             "                          compute_metrics=hf.data.compute_metrics)\n"
             "        if accepts_loss_kwargs is not None:       # section 4: read once, when the Trainer is built\n"
             "            model.accepts_loss_kwargs = accepts_loss_kwargs\n",
             "model.accepts_loss_kwargs = False set after the Trainer was built (it read the attribute already)",
             (NB,), claims=("04/two-ranks",)),
    Mutation("lab 4 script no cpu", "labs/04_trainer_to_accelerator/scripts/accelerate_job.py",
             "cpu=False if a.no_cpu else torch.cuda.device_count() < world,",
             "cpu=False,",
             "the take-home script builds Accelerator() without cpu=True: on a CPU each process trains alone",
             ("tests/labs/lab04_hf/test_scripts.py", "-k", "two_processes"), claims=("04/cpu-launch",)),
)  # fmt: skip
