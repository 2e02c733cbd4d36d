"""Make the scripts importable from any working directory, and keep tests on one thread, in this process
and in the scripts they start (which inherit OMP_NUM_THREADS): the models are tiny, and torch's thread pool
slows them down badly when the two cores are shared with g++ or another job."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.fixture
def quick_limits(monkeypatch):
    """The judge's shorter limits keep the suite fast; the mechanism is the same."""
    import judge
    monkeypatch.setattr(judge, "COMPILE_SECONDS", 4)
    monkeypatch.setattr(judge, "RUN_WALL_SECONDS", 2)
    monkeypatch.setattr(judge, "RUN_CPU_SECONDS", 1)


# The suite's command (-n 2 --dist loadfile --no-loadscope-reorder) hands each of two workers whole files in the order
# collected, two at first: the slowest files first, so that the long ones overlap and the two workers end together.
SLOWEST_FILES = ("test_training.py", "test_task.py", "test_bench_gpu.py", "test_spoc.py", "test_sanstype.py")


def pytest_collection_modifyitems(items):
    """SLOWEST_FILES first, in that order; every other test keeps its place."""
    items.sort(key=lambda item: SLOWEST_FILES.index(item.path.name) if item.path.name in SLOWEST_FILES else 99)
