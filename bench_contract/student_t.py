"""Student's t quantiles for whole degrees of freedom, without scipy (not every environment that reads them has it:
the backends' for Stein's rule, bench_contract.sequential; the orchestrator's for the speed-up's interval,
orchestrator.results.intervals).

For whole degrees of freedom nu, the probability that |T| <= t has a closed form in theta = atan(t / sqrt(nu))
(Abramowitz and Stegun, Handbook of Mathematical Functions, 26.7.3 and 26.7.4):

    nu odd:   (2 / pi) (theta + sin(theta) (cos(theta) + 2/3 cos^3(theta) + ... + 2*4*..*(nu-3) / (1*3*..*(nu-2))
                                            cos^(nu-2)(theta)))          (theta alone for nu = 1)
    nu even:  sin(theta) (1 + 1/2 cos^2(theta) + 1*3 / (2*4) cos^4(theta) + ... + 1*3*..*(nu-3) / (2*4*..*(nu-2))
                          cos^(nu-2)(theta))

It rises from 0 to 1 as theta goes from 0 to pi/2, so the quantile is found by bisection on theta, to the last bit
of a float.
"""

from __future__ import annotations

import math
from functools import lru_cache


def two_sided_probability(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for Student's t with `df` degrees of freedom (the closed form above)."""
    cos, total = math.cos(theta), 0.0
    if df % 2:
        term = cos  # cos^1 with coefficient 1, then each next term times (k - 1) / k cos^2, k = 2, 4, ...
        for k in range(2, df - 1, 2):
            total += term
            term *= k / (k + 1) * cos * cos
        if df > 1:
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)
    term = 1.0  # cos^0, then each next term times (k - 1) / k cos^2, k = 2, 4, ..., df - 2
    for k in range(2, df, 2):
        total += term
        term *= (k - 1) / k * cos * cos
    return math.sin(theta) * (total + term)


@lru_cache(maxsize=None)
def t_quantile(coverage: float, df: int) -> float:
    """The t with P(|T| <= t) = coverage for Student's t with `df` whole degrees of freedom: the half-width, in
    standard errors, of a two-sided `coverage` interval (t_quantile(0.95, 4) = 2.776..., scipy's t.ppf(0.975, 4))."""
    if int(df) != df or df < 1:
        raise ValueError(f"Student's t quantile needs whole degrees of freedom of at least 1, got {df}")
    if not 0 < coverage < 1:
        raise ValueError(f"a two-sided coverage lies between 0 and 1, got {coverage}")
    low, high = 0.0, math.pi / 2
    while True:
        middle = (low + high) / 2
        if middle in (low, high):  # the interval holds no float between its ends: as close as a float gets
            return math.sqrt(df) * math.tan(middle)
        if two_sided_probability(middle, int(df)) < coverage:
            low = middle
        else:
            high = middle
