"""Goals on several data sets in one problem (paper 001: Goh, Cotter, Gupta & Friedlander,
NIPS 2016, "Satisfying Real-world Goals with Dataset Constraints").

What the family adds beyond the core (sources themselves — ``Batch.sources``,
``rates.subsets.source()``, a data config naming several sources — are the core's): the
paper's Table 2 as catalog problems, a deployed model as a baseline, the bias-shifted
baseline, the churn scenario, the ramp loss with majorization–minimization as a run method
(``algorithm=mm``) and the paper's baselines. Its registering module is :mod:`.plugin`.
The user guide is ``docs/dataset_constraints.md``.
"""
