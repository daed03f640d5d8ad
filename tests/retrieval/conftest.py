"""faiss runs single-threaded in these tests: its OpenMP threads spin while waiting, and on a busy 2-core
machine two spinning threads made a 1,200-key PQ training 7x slower than one thread."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _faiss_one_thread():
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
