import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def host(t):
    """A NumPy view of a DLTensor (shares memory)."""
    return np.from_dlpack(t)
