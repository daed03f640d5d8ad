"""Index sizing and the PQ memory formula (ttrl_lightning/retrieval/factory.py)."""
import logging

import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.retrieval.factory import auto_factory, ivfpq_memory_bytes, resolve_factory


@pytest.mark.parametrize("dim, n, want", [
    (384, 2_000_000, "OPQ64,IVF4096,PQ64"),   # the paper's index
    (384, 159_744, "OPQ64,IVF4096,PQ64"),     # 4096 * 39: the smallest corpus for it
    (384, 159_743, "OPQ64,IVF2048,PQ64"),
    (384, 100_000, "OPQ64,IVF2048,PQ64"),     # 100000 // 39 = 2564 -> 2048
    (384, 9_984, "OPQ64,IVF256,PQ64"),        # 39 * 256: the smallest corpus for an 8-bit PQ
    (384, 9_983, "Flat"),
    (64, 20_000, "OPQ16,IVF512,PQ16"),        # sub-vectors of at least 4 values
    (100, 50_000, "OPQ25,IVF1024,PQ25"),      # the largest divisor of 100 that is <= 25
    (3, 10**6, "Flat"),
])
def test_auto_factory(dim, n, want):
    assert auto_factory(dim, n) == want


def test_resolve_factory_names_and_notice(caplog):
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.retrieval.factory"):
        assert resolve_factory("auto", 384, 200_000) == "OPQ64,IVF4096,PQ64"
        assert caplog.text == ""
        assert resolve_factory("auto", 384, 50_000) == "OPQ64,IVF1024,PQ64"
    assert "'auto' -> 'OPQ64,IVF1024,PQ64' for 50000 training vectors" in caplog.text
    assert resolve_factory("HNSW", 8, 0) == "HNSW32"
    assert resolve_factory("IVF64,Flat", 8, 0) == "IVF64,Flat"
    with pytest.raises(UserError, match="factory must be"):
        resolve_factory("  ", 8, 0)


def test_memory_formula_reproduces_the_papers_figures():
    """Pixelis appendix 3: N = 1.25M keys, 64-byte codes -> codes ~80 MB, ids ~5 MB (4-byte ids),
    centroids ~28.5 MB and OPQ ~12.9 MB (both match 1792-d float32 parameters: 4096 x 1792 x 4 = 29.4 MB =
    28.0 MiB, 1792^2 x 4 = 12.8 MB)."""
    terms = ivfpq_memory_bytes(1_250_000, 1792, 4096, 64, id_bytes=4)
    assert terms["codes"] == 80_000_000
    assert terms["ids"] == 5_000_000
    assert terms["centroids"] == 4096 * 1792 * 4 and abs(terms["centroids"] / 2**20 - 28.5) < 0.6
    assert abs(terms["opq"] / 1e6 - 12.9) < 0.1
    assert terms["total"] == sum(v for k, v in terms.items() if k != "total")
