"""Pure statistics: from per-launch values to estimates, intervals and three-valued decisions.

One concept per module: `effects` (log-ratio estimators: Welch, Hodges-Lehmann, bootstrap-t, OLS
interaction), `decisions` (TOST, one-sided tests against a minimum effect, launch outcomes),
`variance` (between/within-launch components, ICC, design effect, optimal requests per launch),
`outliers` (Tukey fences), `sequential` (alpha-spending boundaries), `multiplicity` (Holm / BH);
for a search: `pareto` (front with dominance beyond chance), `capacity` (SLO capacity with a lower
confidence bound), `selection` (the winner's selection-corrected estimate).
The formulas and references are in docs/statistics.md.
"""

from framework.stats.multiplicity import adjust

__all__ = ["adjust"]
