"""The training loop: the :class:`~.engine.Engine` (minibatches, steps, logging, snapshots,
checkpoints), its recorded step (:mod:`.captured`), checkpoint files (:mod:`.checkpoint`),
TensorBoard (:mod:`.logger`) and data parallelism under ``torchrun`` (:mod:`.parallel`)."""
