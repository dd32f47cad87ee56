"""Solutions of the game: snapshots, the stochastic model, best iterate, LP shrinking, and
saving / loading them.

This package is the entry point; the parts live in :mod:`.snapshots` (recording θ_t),
:mod:`.stochastic` (the mixture model), :mod:`.candidates` (evaluating the snapshots on a
split), :mod:`.lp` (choosing among them: best iterate, the LP mixture) and :mod:`.files`
(saving and loading a solution).

A saved solution is one ``torch.save`` file of plain tensors and metadata (its layout:
:mod:`.files`).

Example:
    >>> import io, torch
    >>> model = torch.nn.Linear(2, 1)
    >>> rec = SnapshotRecorder(model, every=1, capacity=3)
    >>> for _ in range(3):
    ...     with torch.no_grad():
    ...         _ = model.bias.add_(1.0)
    ...     _ = rec.step()
    >>> mix = rec.to_stochastic_model()
    >>> f = io.BytesIO()
    >>> save_solution(f, mix, metadata={"split": "validation"})
    >>> _ = f.seek(0)
    >>> again = load_solution(f, torch.nn.Linear(2, 1))
    >>> len(again), again.steps
    (3, [1, 2, 3])
"""

from .candidates import CandidateValues, evaluate_candidates
from .files import load_solution, save_solution
from .lp import RULES, LPMixture, best_iterate, shrink_lp
from .snapshots import STRATEGIES, SnapshotRecorder, model_state
from .stochastic import ModuleSource, StochasticModel, materialize, skeleton_of

__all__ = [
    "RULES", "STRATEGIES", "CandidateValues", "LPMixture", "ModuleSource", "SnapshotRecorder",
    "StochasticModel", "best_iterate", "evaluate_candidates", "load_solution", "materialize",
    "model_state", "save_solution", "shrink_lp", "skeleton_of",
]
