"""The reduction tests solve many small least-squares problems; on shared cores torch's
intra-op threads oversubscribe and slow them five-fold, so they run on one thread (restored
after each test)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
