"""Balanced filtering through proxies (paper 002: Deng, Diana, Kearns, Roth, "Balanced
Filtering via Disclosure-Controlled Proxies"): keep a sample balanced in a protected
attribute z — or distributed as any target — from a stream whose z is never observed, through
a proxy of z fitted on a small labelled sample.

The parts import light (numpy, scipy; scikit-learn only when a proxy is fitted):

* :class:`BalancedFilter` (:mod:`.balanced`): fit / filter / stream / report / save / load;
* :func:`sampling_probabilities` (:mod:`.qp`): Algorithm 1, ρ from a posterior table, with an
  optional floor on the acceptance rate; :func:`equal_count_probabilities`, the naive rule;
* :mod:`.sampler` (Algorithm 2), :mod:`.proxies` (the four baselines' models), :mod:`.metrics`
  and :mod:`.report` (disclosivity, imbalance, acceptance), :mod:`.store` (one JSON file);
* :func:`filter_arrays` (:mod:`.data`): features and z of a packaged data set's split, with z's
  columns and the label left out.

The user guide is ``docs/filtering.md``.

Example:
    >>> import numpy as np
    >>> from fairgames.filtering import sampling_probabilities
    >>> s = sampling_probabilities(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0.7, 0.3]))
    >>> np.round(s.distribution, 6).tolist(), s.exact
    ([0.5, 0.5], True)
"""

from .balanced import BalancedFilter, FilterStream
from .data import FilterData, filter_arrays
from .errors import FilterError
from .qp import Sampling, equal_count_probabilities, sampling_probabilities

__all__ = ["BalancedFilter", "FilterData", "FilterError", "FilterStream", "Sampling",
           "equal_count_probabilities", "filter_arrays", "sampling_probabilities"]
