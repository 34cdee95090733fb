"""The digits data set is read from scikit-learn's own file without importing scikit-learn (its import took longer
than a digits cell's training): the same images and labels as sklearn.datasets.load_digits gives."""

import subprocess
import sys

import numpy as np
from helpers import REPO_ROOT
from sklearn.datasets import load_digits

from bench_contract.data.datasets import digits_file, read_digits_file


def test_the_file_read_directly_equals_scikit_learns_digits():
    x, y = read_digits_file(digits_file())
    theirs = load_digits()
    assert x.shape == (1797, 64) and x.dtype == theirs.data.dtype
    np.testing.assert_array_equal(x, theirs.data)  # the same parser on the same text: equal, bit for bit
    np.testing.assert_array_equal(y, theirs.target)


def test_loading_digits_imports_no_scikit_learn():
    code = ("import sys; from bench_contract.data.datasets import load_digits; d = load_digits(); "
            "print(len(d.x_train), any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.split() == ["1257", "False"]
