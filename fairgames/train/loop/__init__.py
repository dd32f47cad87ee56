"""The training loop: the :class:`~.engine.Engine` (minibatches, steps, the loop), its settings
(:mod:`.settings`), what it logs (:mod:`.records`), its checkpointed state (:mod:`.state`), the
signals that stop it (:mod:`.signals`), its recorded step (:mod:`.captured`), checkpoint files
(:mod:`.checkpoint`), TensorBoard (:mod:`.logger`) and data parallelism under ``torchrun``
(:mod:`.parallel`)."""
