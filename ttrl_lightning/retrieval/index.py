"""``ExemplarIndex``: the neighbourhood search of Pixel TTRL (Pixelis 3.2.3, appendices 3 and 11).

A faiss index built from a factory string (:mod:`.factory`: the paper's ``OPQ64,IVF4096,PQ64`` by default,
scaled to the corpus; HNSW or any factory string on request) over L2-normalised keys, so that the inner
product is the cosine similarity. Search asks faiss for the top ``rerank`` (256) candidates, probing
``nprobe`` (32) lists, and re-ranks them by the exact cosine against the stored float32 keys:

    score(q, x) = <q / |q|, x / |x|>,   neighbours = top-k of the re-ranked candidates.

Leakage control (appendix 11) lives in the index itself, so no caller can forget it:

* ``whitelist``: ids of evaluation items. They are refused at :meth:`add` before any vector reaches faiss
  (never a code, never a list assignment); extending the whitelist later also deactivates a present item;
* ``blocklist``: ids refused at ingest as near-duplicates (:mod:`.dedup`, earliest ingest wins) or blocked
  later with :meth:`block`; a blocked item that is already in the index is deactivated;
* every search filters out inactive items twice: a faiss ``IDSelectorBitmap`` inside the search (so that
  the candidates are active ones) and a check of every returned candidate (so that no code path can return
  one).

Adds are append-only: once the index is trained (on the vectors present at the first search, or at an
explicit :meth:`train`), new vectors are encoded with the trained quantisers; nothing is retrained during
online TTRL. :meth:`save` / :meth:`load` keep everything in one file with a SHA-256 checksum; a file that is
corrupt, of another format version or inconsistent with itself raises :class:`IndexFileError` naming it.

When faiss sees a GPU (a faiss-gpu build) the candidate search of an index without inactive items runs on
a GPU copy; training, adds and the exact re-rank stay on the CPU.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import zipfile
from typing import Iterable, Sequence

import numpy as np

from ..errors import UserError
from ..safe_files import atomic_write
from . import _optional
from .factory import (DEFAULT_EF_SEARCH, DEFAULT_NPROBE, DEFAULT_RERANK, KMEANS_ITERATIONS,
                      TRAIN_POINTS_PER_CENTROID, factory_lists, resolve_factory)

logger = logging.getLogger(__name__)

#: Version of the file :meth:`ExemplarIndex.save` writes; :meth:`ExemplarIndex.load` refuses others.
FORMAT = "ttrl-exemplar-index"
FORMAT_VERSION = 2  # 2: meta.json has its own checksum (meta_sha256)
#: Training budget on a small CPU (faiss' defaults, e.g. OPQ 50 iterations on 65,536 keys with a 40-iteration
#: first PQ, take over 15 minutes on 2 cores for 384-d keys): OPQ rotation iterations (and those of its first
#: PQ) and most keys used; PQ codebook k-means iterations and most residuals used.
OPQ_ITERATIONS, OPQ_TRAIN_POINTS = 10, 16384
PQ_ITERATIONS, PQ_TRAIN_POINTS = 10, 32768
_MEMBERS = ("meta.json", "index.faiss", "vectors.npy", "active.npy", "ids.json")


class IndexFileError(UserError):
    """An index file that cannot be used (corrupt, another format or version, inconsistent, wrong dim)."""


@dataclasses.dataclass
class AddReport:
    """What :meth:`ExemplarIndex.add` did with each id: ``added`` in order; ``whitelisted`` and
    ``blocked`` refused before reaching faiss."""

    added: list[str] = dataclasses.field(default_factory=list)
    whitelisted: list[str] = dataclasses.field(default_factory=list)
    blocked: list[str] = dataclasses.field(default_factory=list)


def normalise_rows(vectors, dim: int, what: str = "vectors") -> np.ndarray:
    """``vectors`` as a C-contiguous float32 ``[n, dim]`` array of unit rows; refuses other shapes, NaN / inf
    and zero rows (naming the row)."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim == 1 and x.shape[0] == dim:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != dim:
        raise UserError(f"{what} must have shape [n, {dim}], got {list(np.shape(vectors))}")
    if not np.isfinite(x).all():
        row = int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
        raise UserError(f"{what}: row {row} has NaN or inf")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if (norms == 0).any():
        raise UserError(f"{what}: row {int(np.nonzero(norms[:, 0] == 0)[0][0])} is all zeros (no direction)")
    return np.ascontiguousarray(x / norms, dtype=np.float32)


def _check_ids(ids: Sequence[str], what: str = "ids") -> list[str]:
    if isinstance(ids, (str, bytes)):  # list("s5") would be its letters
        raise UserError(f"{what} must be a list of ids, not the string {ids[:40]!r}")
    ids = list(ids)
    for i, item in enumerate(ids):
        if not isinstance(item, str) or not item:
            raise UserError(f"{what}[{i}] must be a non-empty string, got {item!r}")
    return ids


def _meta_sha256(meta: dict) -> str:
    """SHA-256 of the metadata without its own checksum, in a canonical JSON form."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _meta_problem(meta: dict) -> str | None:
    """What is wrong with the metadata's fields, or None."""
    for name in ("dim", "count", "nprobe", "rerank", "ef_search", "train_size", "seed"):
        value = meta.get(name)
        if name == "train_size" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{name} must be an integer >= 0, got {value!r}"
    for name in ("whitelist", "blocklist"):
        value = meta.get(name)
        if not isinstance(value, list) or not all(isinstance(i, str) and i for i in value):
            return f"{name} must be a list of ids, got {str(value)[:60]!r}"
    if not isinstance(meta.get("factory"), str):
        return f"factory must be a string, got {meta.get('factory')!r}"
    return None


class ExemplarIndex:
    """Approximate cosine search over exemplar keys with exact re-rank and leakage control.

    Args:
        dim: key dimension.
        factory: ``"auto"`` (the paper's ``OPQ64,IVF4096,PQ64`` scaled to the corpus), ``"hnsw"`` or a faiss
            index-factory string (:mod:`.factory`).
        whitelist: ids of evaluation items that must never enter the index.
        nprobe: IVF lists probed per query (paper: 32; capped at the number of lists).
        rerank: candidates re-ranked by exact cosine (paper: 256).
        ef_search: HNSW search breadth (paper's ablation: 128).
        train_size: training vectors drawn for IVF / PQ (default ``64 * n_list``, all when fewer).
        seed: seed of the training sample and of faiss' k-means.
        use_gpu: ``"auto"`` (a GPU copy for search when faiss sees a GPU), ``True`` (required) or ``False``.
    """

    def __init__(self, dim: int, factory: str = "auto", whitelist: Iterable[str] = (), *,
                 nprobe: int = DEFAULT_NPROBE, rerank: int = DEFAULT_RERANK,
                 ef_search: int = DEFAULT_EF_SEARCH,
                 train_size: int | None = None, seed: int = 0, use_gpu: bool | str = "auto"):
        for name, value in (("dim", dim), ("nprobe", nprobe), ("rerank", rerank), ("ef_search", ef_search)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UserError(f"{name} must be a positive integer, got {value!r}")
        if train_size is not None and (isinstance(train_size, bool) or int(train_size) < 1):
            raise UserError(f"train_size must be a positive integer or None, got {train_size!r}")
        if use_gpu not in ("auto", True, False):
            raise UserError(f"use_gpu must be 'auto', True or False, got {use_gpu!r}")
        if not isinstance(factory, str) or not factory.strip():
            raise UserError("factory must be 'auto', 'hnsw' or a faiss index-factory string, "
                            f"got {factory!r}")
        self.dim, self.factory = int(dim), factory
        self.nprobe, self.rerank, self.ef_search = int(nprobe), int(rerank), int(ef_search)
        self.train_size, self.seed, self.use_gpu = train_size, int(seed), use_gpu
        self.whitelist: set[str] = set(_check_ids(whitelist, "whitelist"))
        self.blocklist: set[str] = set()
        self.resolved_factory: str | None = None
        self._index = None
        self._gpu_index = None
        self._vectors = np.empty((0, self.dim), dtype=np.float32)
        self._count = 0
        self._active = np.empty(0, dtype=bool)
        self._ids: list[str] = []
        self._position: dict[str, int] = {}

    # --- contents -------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of searchable (active) items."""
        return int(self._active[: self._count].sum())

    def __contains__(self, item: str) -> bool:
        """True when ``item`` is a searchable item of the index."""
        pos = self._position.get(item)
        return pos is not None and bool(self._active[pos])

    @property
    def ids(self) -> list[str]:
        """Every stored id in ingest order (inactive ones included)."""
        return list(self._ids)

    @property
    def vectors(self) -> np.ndarray:
        """The stored unit keys ``[n, dim]`` in ingest order (a read-only view)."""
        view = self._vectors[: self._count]
        view.flags.writeable = False
        return view

    @property
    def is_trained(self) -> bool:
        return self._index is not None

    def active_ids(self) -> list[str]:
        return [i for i, a in zip(self._ids, self._active[: self._count]) if a]

    def position(self, item: str) -> int | None:
        """Row of ``item`` in :attr:`vectors`, or None."""
        return self._position.get(item)

    # --- leakage control ------------------------------------------------------------------------------------

    def extend_whitelist(self, ids: Iterable[str]) -> list[str]:
        """Add evaluation ids to the whitelist; items already present are deactivated. Returns those."""
        ids = _check_ids(ids, "whitelist")
        self.whitelist.update(ids)
        return self._deactivate(ids)

    def block(self, ids: Iterable[str]) -> list[str]:
        """Put ids on the blocklist (refused at every later add); items already present are deactivated.
        Returns the deactivated ones."""
        ids = _check_ids(ids, "blocklist")
        self.blocklist.update(ids)
        return self._deactivate(ids)

    def _deactivate(self, ids: list[str]) -> list[str]:
        hit = [i for i in ids if i in self]
        for item in hit:
            self._active[self._position[item]] = False
        if hit:
            self._gpu_index = None
        return hit

    def refused(self, item: str) -> str | None:
        """``"whitelisted"``, ``"blocked"`` or None: why ``item`` may not enter the index."""
        if item in self.whitelist:
            return "whitelisted"
        if item in self.blocklist:
            return "blocked"
        return None

    # --- building -------------------------------------------------------------------------------------------

    def add(self, ids: Sequence[str], vectors) -> AddReport:
        """Append items: ``ids`` (unique strings, not yet in the index) and ``vectors`` ``[n, dim]``.

        Whitelisted and blocked ids are dropped *before* anything reaches faiss; the rest are normalised,
        stored for the exact re-rank and, once the index is trained, encoded into it (append-only). The whole
        call is checked first: a bad id or vector adds nothing.
        """
        ids = _check_ids(ids)
        x = normalise_rows(vectors, self.dim) if len(ids) else np.empty((0, self.dim), np.float32)
        if x.shape[0] != len(ids):
            raise UserError(f"add: {len(ids)} ids but {x.shape[0]} vectors")
        seen: set[str] = set()
        for item in ids:
            if item in self._position or item in seen:
                raise UserError(f"add: id {item!r} is already in the index (ids are unique, adds "
                                "append-only)")
            seen.add(item)
        report = AddReport()
        keep = []
        for row, item in enumerate(ids):
            reason = self.refused(item)
            if reason == "whitelisted":
                report.whitelisted.append(item)
            elif reason == "blocked":
                report.blocked.append(item)
            else:
                keep.append(row)
                report.added.append(item)
        if not keep:
            return report
        new = x[keep]
        self._append(report.added, new)
        if self._index is not None:
            self._index.add(new)
            self._gpu_index = None
            if self._index.ntotal != self._count:
                raise RuntimeError(f"faiss holds {self._index.ntotal} vectors, the index {self._count}")
        return report

    def _append(self, ids: list[str], x: np.ndarray) -> None:
        start, need = self._count, self._count + x.shape[0]
        if need > self._vectors.shape[0]:
            capacity = max(need, 2 * self._vectors.shape[0], 1024)
            grown = np.empty((capacity, self.dim), dtype=np.float32)
            grown[:start] = self._vectors[:start]
            self._vectors = grown
            active = np.zeros(capacity, dtype=bool)
            active[:start] = self._active[:start]
            self._active = active
        self._vectors[start:need] = x
        self._active[start:need] = True
        for offset, item in enumerate(ids):
            self._position[item] = start + offset
        self._ids.extend(ids)
        self._count = need

    def train(self) -> str:
        """Build the faiss index on the stored vectors (the ``"auto"`` factory is sized to them) and encode
        them; later adds are appended. Returns the factory string used. Training twice is refused."""
        if self._index is not None:
            raise UserError(f"the index is already trained ({self.resolved_factory}); adds are append-only")
        faiss = _optional.faiss()
        n = self._count
        resolved = resolve_factory(self.factory, self.dim, n)
        try:
            index = faiss.index_factory(self.dim, resolved, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as error:
            raise UserError(f"faiss cannot build index factory {resolved!r} for dim {self.dim}: "
                            f"{str(error).splitlines()[-1]}") from None
        if not index.is_trained:
            lists = factory_lists(resolved)
            want = self.train_size or (TRAIN_POINTS_PER_CENTROID * lists if lists else n)
            if n == 0:
                raise UserError(f"index {resolved!r} needs training vectors: add some before the first "
                                "search")
            rng = np.random.default_rng(self.seed)
            sample = self._vectors[np.sort(rng.choice(n, size=min(n, want), replace=False))] if want < n \
                else self._vectors[:n]
            self._configure_training(faiss, index)
            index.train(np.ascontiguousarray(sample))
        if n:
            index.add(self._vectors[:n])
        self._index, self.resolved_factory = index, resolved
        self._set_search_parameters()
        return resolved

    def _configure_training(self, faiss, index) -> None:
        """Seeded coarse k-means with the paper's 20 iterations; the OPQ rotation and the PQ codebooks with
        the reduced budget of :data:`OPQ_ITERATIONS` / :data:`PQ_ITERATIONS` (module constants)."""
        outer = faiss.downcast_index(index)
        if isinstance(outer, faiss.IndexPreTransform):
            for i in range(outer.chain.size()):
                transform = faiss.downcast_VectorTransform(outer.chain.at(i))
                if isinstance(transform, faiss.OPQMatrix):
                    transform.niter = transform.niter_pq_0 = OPQ_ITERATIONS
                    transform.max_train_points = OPQ_TRAIN_POINTS
        try:
            ivf = faiss.extract_index_ivf(index)
        except RuntimeError:
            return
        ivf.cp.niter = KMEANS_ITERATIONS
        ivf.cp.seed = self.seed
        ivf.cp.max_points_per_centroid = 1 << 30  # the sample is drawn above, seeded
        ivfpq = faiss.try_extract_index_ivf(index)
        pq = getattr(faiss.downcast_index(ivfpq), "pq", None)
        if pq is not None:
            pq.cp.niter, pq.cp.seed = PQ_ITERATIONS, self.seed
            pq.cp.max_points_per_centroid = max(1, PQ_TRAIN_POINTS // pq.ksub)

    def _set_search_parameters(self) -> None:
        faiss = _optional.faiss()
        space = faiss.ParameterSpace()
        lists = factory_lists(self.resolved_factory or "")
        if lists:
            space.set_index_parameter(self._index, "nprobe", min(self.nprobe, lists))
        if "HNSW" in (self.resolved_factory or ""):
            space.set_index_parameter(self._index, "efSearch", self.ef_search)

    # --- search ---------------------------------------------------------------------------------------------

    def _search_params(self, faiss, selector):
        inner = faiss.downcast_index(self._index)
        pre = isinstance(inner, faiss.IndexPreTransform)
        if pre:
            inner = faiss.downcast_index(inner.index)
        if isinstance(inner, faiss.IndexIVF):
            params = faiss.SearchParametersIVF(nprobe=int(inner.nprobe), sel=selector)
        elif isinstance(inner, faiss.IndexHNSW):
            params = faiss.SearchParametersHNSW(efSearch=int(inner.hnsw.efSearch), sel=selector)
        else:
            params = faiss.SearchParameters(sel=selector)
        return faiss.SearchParametersPreTransform(index_params=params) if pre else params

    def _gpu(self, faiss):
        if self.use_gpu is False or not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
            if self.use_gpu is True:
                raise UserError("use_gpu=True but faiss sees no GPU (install faiss-gpu on a GPU machine)")
            return None
        if self._gpu_index is None:
            self._gpu_resources = getattr(self, "_gpu_resources", None) or faiss.StandardGpuResources()
            self._gpu_index = faiss.index_cpu_to_gpu(self._gpu_resources, 0, self._index)
        return self._gpu_index

    def search(self, vectors, k: int) -> list[list[tuple[str, float]]]:
        """The ``k`` nearest active items of each query row: ``[[(id, cosine), ...], ...]``, best first
        (ties by ingest order); fewer than ``k`` when the index holds fewer active items.

        Candidates: faiss' top ``max(k, rerank)`` by approximate score; each is re-scored by the exact cosine
        against its stored key before the top ``k`` are kept.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"k must be a positive integer, got {k!r}")
        q = normalise_rows(vectors, self.dim, "queries")
        if len(self) == 0:
            return [[] for _ in range(q.shape[0])]
        if self._index is None:
            self.train()
        faiss = _optional.faiss()
        active = self._active[: self._count]
        wanted = min(max(int(k), self.rerank), self._count)
        if active.all():
            gpu = self._gpu(faiss)
            _, cand = (gpu or self._index).search(q, wanted)
        else:
            bitmap = np.packbits(active, bitorder="little")
            selector = faiss.IDSelectorBitmap(self._count, faiss.swig_ptr(bitmap))
            _, cand = self._index.search(q, wanted, params=self._search_params(faiss, selector))
        out = []
        for row in range(q.shape[0]):
            c = cand[row]
            c = c[(c >= 0) & (c < self._count)]
            c = c[active[c]]
            exact = self._vectors[c] @ q[row]
            order = np.lexsort((c, -exact))[:k]
            out.append([(self._ids[c[i]], float(exact[i])) for i in order])
        return out

    # --- persistence ----------------------------------------------------------------------------------------

    def _meta(self) -> dict:
        return {"format": FORMAT, "version": FORMAT_VERSION, "dim": self.dim, "count": self._count,
                "factory": self.factory, "resolved_factory": self.resolved_factory, "nprobe": self.nprobe,
                "rerank": self.rerank, "ef_search": self.ef_search, "train_size": self.train_size,
                "seed": self.seed, "whitelist": sorted(self.whitelist), "blocklist": sorted(self.blocklist)}

    def save(self, path: str | os.PathLike) -> None:
        """Write the index (faiss structure, stored keys, ids, activity, whitelist, blocklist, settings) to
        one file, atomically, with a SHA-256 checksum of every part."""
        faiss = _optional.faiss()
        parts = {
            "index.faiss": b"" if self._index is None else faiss.serialize_index(self._index).tobytes(),
            "vectors.npy": _npy(self._vectors[: self._count]),
            "active.npy": _npy(self._active[: self._count]),
            "ids.json": json.dumps(self._ids).encode(),
        }
        meta = self._meta()
        meta["sha256"] = {name: hashlib.sha256(data).hexdigest() for name, data in parts.items()}
        meta["meta_sha256"] = _meta_sha256(meta)
        with atomic_write(path, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive:
                archive.writestr("meta.json", json.dumps(meta, indent=1))
                for name, data in parts.items():
                    archive.writestr(name, data)

    @classmethod
    def load(cls, path: str | os.PathLike, dim: int | None = None, *, use_gpu: bool | str = "auto"
             ) -> "ExemplarIndex":
        """Read a file written by :meth:`save`. ``dim``: the key dimension the caller expects (refused when
        the file's differs). Raises :class:`IndexFileError` naming ``path`` when the file is not such an
        index, has another format version, fails its checksum or is inconsistent with itself."""
        path = os.fspath(path)

        def bad(reason: str) -> IndexFileError:
            return IndexFileError(f"{path}: {reason}")

        if not os.path.exists(path):
            raise FileNotFoundError(2, "no such index file", path)
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
                missing = [m for m in _MEMBERS if m not in names]
                if missing:
                    raise bad(f"not an exemplar index file (missing {', '.join(missing)})")
                # save() stores every member uncompressed, so nothing read can be larger than the file: a
                # compressed member (a zip bomb inflating 1.5 MB to 1.5 GB) is refused before it is read
                size = os.path.getsize(path)
                for name in _MEMBERS:
                    info = archive.getinfo(name)
                    if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                        raise bad(f"{name} is compressed or larger than the file ({info.file_size:,} bytes); "
                                  "not written by ExemplarIndex.save")
                data = {name: archive.read(name) for name in _MEMBERS}
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as error:
            if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError)):
                raise
            raise bad(f"not an exemplar index file or corrupt ({error})") from None
        try:
            meta = json.loads(data["meta.json"])
        except ValueError as error:
            raise bad(f"corrupt metadata ({error})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            found = meta.get('format') if isinstance(meta, dict) else meta
            raise bad(f"not an exemplar index file (format {found!r})")
        if meta.get("version") != FORMAT_VERSION:
            raise bad(f"index format version {meta.get('version')!r}; this version reads {FORMAT_VERSION}")
        if meta.get("meta_sha256") != _meta_sha256(meta):
            raise bad("checksum mismatch in meta.json (the file is corrupt or its settings, whitelist or "
                      "blocklist were edited)")
        problem = _meta_problem(meta)
        if problem:
            raise bad(f"corrupt metadata ({problem})")
        sums = meta.get("sha256") or {}
        for name in _MEMBERS[1:]:
            if hashlib.sha256(data[name]).hexdigest() != sums.get(name):
                raise bad(f"checksum mismatch in {name} (the file is corrupt or was edited)")
        file_dim, count = meta.get("dim"), meta.get("count")
        if dim is not None and file_dim != dim:
            raise bad(f"index of dim {file_dim}, expected {dim}")
        try:
            vectors = np.load(io.BytesIO(data["vectors.npy"]), allow_pickle=False)
            active = np.load(io.BytesIO(data["active.npy"]), allow_pickle=False)
            ids = json.loads(data["ids.json"])
        except ValueError as error:
            raise bad(f"corrupt contents ({error})") from None
        if vectors.dtype != np.float32 or vectors.shape != (count, file_dim):
            raise bad(f"stored keys have shape {list(vectors.shape)} {vectors.dtype}, metadata says "
                      f"[{count}, {file_dim}] float32")
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise bad("corrupt contents (ids.json must be a list of non-empty string ids)")
        if active.dtype != bool or active.shape != (count,) or len(ids) != count or len(set(ids)) != count:
            raise bad(f"ids / activity do not match the {count} stored keys")
        index = cls(file_dim, meta["factory"], meta["whitelist"], nprobe=meta["nprobe"],
                    rerank=meta["rerank"],
                    ef_search=meta["ef_search"], train_size=meta["train_size"], seed=meta["seed"],
                    use_gpu=use_gpu)
        index.blocklist = set(meta["blocklist"])
        index._vectors, index._active, index._count = np.ascontiguousarray(vectors), active.copy(), count
        index._ids, index._position = list(ids), {item: i for i, item in enumerate(ids)}
        leaked = [i for i in ids if index._active[index._position[i]] and index.refused(i)]
        if leaked:
            raise bad(f"{len(leaked)} active item(s) are whitelisted or blocked (first {leaked[0]!r})")
        if data["index.faiss"]:
            faiss = _optional.faiss()
            try:
                structure = faiss.deserialize_index(np.frombuffer(data["index.faiss"], dtype=np.uint8))
            except RuntimeError as error:
                raise bad(f"corrupt faiss index ({str(error).splitlines()[0][:200]})") from None
            if structure.d != file_dim or structure.ntotal != count:
                raise bad(f"faiss index holds {structure.ntotal} vectors of dim {structure.d}, metadata says "
                          f"{count} of dim {file_dim}")
            index._index, index.resolved_factory = structure, meta["resolved_factory"]
            index._set_search_parameters()
        return index


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()
