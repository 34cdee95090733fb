"""Student's t quantiles computed without scipy (bench_contract.student_t), against the published table and against
scipy, which the orchestrator's test environment has."""

import pytest

from bench_contract.student_t import t_quantile


@pytest.mark.parametrize("coverage, df, table", [
    # Two-sided 95% and 99% points of Student's t (e.g. Abramowitz and Stegun, table 26.10), to their digits.
    (0.95, 1, 12.706205), (0.95, 2, 4.302653), (0.95, 3, 3.182446), (0.95, 4, 2.776445), (0.95, 5, 2.570582),
    (0.95, 9, 2.262157), (0.95, 10, 2.228139), (0.95, 30, 2.042272), (0.95, 120, 1.979930),
    (0.99, 1, 63.656741), (0.99, 4, 4.604095), (0.99, 10, 3.169273),
])
def test_the_quantiles_are_the_tables(coverage, df, table):
    assert t_quantile(coverage, df) == pytest.approx(table, abs=5e-7)


def test_the_quantiles_equal_scipys_to_the_last_digits_at_every_degree_of_freedom_people_use():
    from scipy import stats

    for df in [*range(1, 200), 1000]:
        for coverage in (0.5, 0.9, 0.95, 0.99):
            assert t_quantile(coverage, df) == pytest.approx(stats.t.ppf((1 + coverage) / 2, df), rel=1e-11)


@pytest.mark.parametrize("coverage, df", [(0.95, 0), (0.95, 2.5), (0.95, -1), (1.0, 4), (0.0, 4)])
def test_a_quantile_outside_its_domain_is_refused(coverage, df):
    with pytest.raises(ValueError):
        t_quantile(coverage, df)
