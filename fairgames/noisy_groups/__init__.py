"""Noisy protected groups (paper 004: Wang et al., NeurIPS 2020): constraints that hold for the
TRUE groups when training sees only noisy ones.

The family's game parts import light (torch, numpy, scipy), like :mod:`fairgames.game`:

* :class:`DROPlayer` (:mod:`.dro`): an adversarial reweighting ``p̃_j`` of each noisy group in
  the TV ball ``‖p̃_j − p̂_j‖₁ ≤ 2γ_j`` ∩ simplex; :func:`robust_values` (:mod:`.tv_ball`), the
  exact worst case of a constraint over those balls;
* :class:`SoftAssignmentPlayer` (:mod:`.soft_assignments`): a table ``W`` of
  ``P(G = j | Ŷ, Y, Ĝ)`` in the feasible set 𝒲(θ) (:mod:`.soft_groups`, :mod:`.soft_rates`),
  and :func:`soft_worst_case` (:mod:`.soft_worst_case`), the exact worst case over 𝒲 (an LP);
* :class:`IdealSoftAssignments` (:mod:`.ideal_soft`): the ideal Algorithms 1 and 3.

The run pipeline's glue — the ``robust`` config group, the players it adds to the game, the
robust report and best-iterate rules, the ideal algorithm as a run method — is
:mod:`.robust`, :mod:`.select`, :mod:`.noise_model` and :mod:`.ideal`.
The user guide is ``docs/noisy_groups.md``.

Example:
    >>> import torch
    >>> from fairgames.noisy_groups import DROPlayer
    >>> player = DROPlayer("group", torch.tensor([0, 0, 1, 1]), [0.1, 0.2])
    >>> player.name
    'dro'
"""

from .dro import DROPlayer
from .ideal_soft import IdealSettings, IdealSoftAssignments
from .soft_assignments import SoftAssignmentPlayer
from .soft_groups import project_soft_assignments
from .soft_worst_case import SoftWorstCase, soft_worst_case
from .tv_ball import robust_values, sample_tv_ball

__all__ = ["DROPlayer", "IdealSettings", "IdealSoftAssignments", "SoftAssignmentPlayer",
           "SoftWorstCase", "project_soft_assignments", "robust_values", "sample_tv_ball",
           "soft_worst_case"]
