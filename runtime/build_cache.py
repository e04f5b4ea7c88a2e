"""The whole-build cache: ``runtime.build``'s executable kept as a module file, by content.

A warm kernel cache still leaves ``runtime.build`` its Python work: optimizing and fusing the
module again, lowering every group to TIR to find its kernel-cache key, loading each
kernel's library and emitting the VM bytecode (~80 ms for the W2 training step, in a fresh
process). This cache skips all of it: the first build of a module exports its executable
(``export_library``: one shared library with relay_ir's checked trailer) under the kernel
cache directory as ``builds/build-<key>.so`` (with its kernel counts in
``build-<key>.so.json``); a later build of the same module with the same
options is a hash of the module plus one :func:`~relay_ir.runtime.relax_export.load_module`.

**Key** (SHA-256) of everything that changes the executable:

* the module's canonical text (``astext``: the printer is exact for constants and floats,
  and ``parse(astext(m))`` is structurally equal to ``m``), the entry, ``opt_level``,
  ``max_fuse_depth``, ``fast_math``, the current ``PassContext``'s config (``unsafe_math``);
* the bound ``params`` (bound before the key is taken: constants are printed exactly, as
  base64 bytes in the text's metadata section);
* the resolved target (its full config: the CPU, its features, the number of cores);
* relay_ir's code (version, and the size and modification time of every source file of
  the ``relay_ir``, ``relay_ir.passes``, ``relay_ir.runtime`` and grammar packages: an edited
  file is a new key), the TVM version, the Python version;
* the compiler's module-level switches: every public upper-case global of plain data (bools,
  numbers, strings, tuples and lists of them) in the modules that schedule, lower and fuse
  (:data:`SETTING_MODULES`), so flipping ``schedules.PACK_PANELS`` is a miss.

**Never a wrong result.** An entry is written only after the build succeeded; a file that is
missing, truncated, corrupt (checksum), of another format or TVM version, or that fails to
load, is deleted and the module is built again (and re-cached). The CUDA target, a kernel
cache without a disk store (``KernelCache(use_disk=False)``) and ``RELAY_IR_BUILD_CACHE=0``
skip the cache entirely.

**What a hit returns**: a :class:`CachedBuild`, which runs exactly as the built executable
(the same bytecode and kernels: it *is* the exported module, as ``runtime.load_module``
returns it). What needs the compiler's in-memory objects -- ``.module`` (the fused module),
``kernel_sources()``, ``run_batch``, ``export_library`` for another entry or ``batched=True``
-- builds the module once more on first use (``export_library`` of the default entry just
copies the cached file). Runtime errors of a hit carry no source spans (a module file keeps
none), but argument errors do: they point at the entry's parameters in the module
``runtime.build`` was given, as the built executable's do.

The test suite sets ``RELAY_IR_BUILD_CACHE=0`` (tests/conftest.py): the compiler's tests must
compile. ``tests/test_build_cache.py`` turns it on.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from typing import Any, Callable

from relay_ir.errors import DiagnosticError
from relay_ir.runtime.relax_export import LoadedRelaxModule, _load, _read, _verify

ENV_VAR = "RELAY_IR_BUILD_CACHE"
FORMAT_VERSION = 1
SUBDIR = "builds"
#: the most the module files of the whole-build cache may take, in MiB (``RELAY_IR_BUILD_CACHE_MB``)
SIZE_ENV_VAR = "RELAY_IR_BUILD_CACHE_MB"
DEFAULT_SIZE_MB = 4096.0

#: modules whose upper-case plain-data globals are part of the key (imported at key time)
SETTING_MODULES: tuple[str, ...] = (
    "relay_ir.runtime.schedules", "relay_ir.runtime.lower_tvm",
    "relay_ir.runtime.target_lowering", "relay_ir.runtime.executor",
    "relay_ir.runtime.relax_vm", "relay_ir.runtime.relax_plan", "relay_ir.runtime.compiler",
    "relay_ir.runtime.winograd", "relay_ir.runtime.kernel_cache", "relay_ir.op._te",
    "relay_ir.passes.fuse_ops", "relay_ir.passes.optimizer",
)

#: public upper-case globals of those modules that are state, not settings
_NOT_SETTINGS = frozenset({"relay_ir.runtime.kernel_cache.COMPILE_COUNT"})

#: counters of this process (tests read them): hits, misses, stored, rebuilt_corrupt, evicted
STATS: dict[str, int] = {"hits": 0, "misses": 0, "stored": 0, "rebuilt_corrupt": 0,
                         "evicted": 0}


def enabled() -> bool:
    """Whether the whole-build cache is on (``RELAY_IR_BUILD_CACHE``: ``0``, ``off``,
    ``false`` or ``no`` turn it off; on by default; another value is a DiagnosticError)."""
    from relay_ir.errors import env_switch
    return env_switch(ENV_VAR)


_CODE: list[str] = []


def code_digest() -> str:
    """relay_ir's code (:func:`~relay_ir.runtime.kernel_cache.source_digest`) and TVM's
    version."""
    if not _CODE:
        import tvm

        from relay_ir.runtime.kernel_cache import source_digest
        _CODE.append(hashlib.sha256(f"{FORMAT_VERSION}|{source_digest()}|"
                                    f"{tvm.__version__}".encode()).hexdigest())
    return _CODE[0]


def _plain(v: Any) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (tuple, list, frozenset, set)):
        return all(_plain(x) for x in v)
    return False


def settings_digest() -> str:
    """The compiler's module-level switches (upper-case globals of plain data)."""
    import importlib
    h = hashlib.sha256()
    for name in SETTING_MODULES:
        mod = importlib.import_module(name)
        for k in sorted(vars(mod)):
            if not k[:1].isupper() or k.upper() != k or f"{name}.{k}" in _NOT_SETTINGS:
                continue
            v = vars(mod)[k]
            if _plain(v):
                if isinstance(v, (set, frozenset)):
                    v = sorted(map(repr, v))
                h.update(f"{name}.{k}={v!r}\n".encode())
    return h.hexdigest()


def build_key(mod: Any, target: str, entry: str, opt_level: int, max_fuse_depth: int,
              fast_math: bool | None) -> str:
    """The cache key of one ``runtime.build`` call (module docstring); ``mod`` with its
    ``params`` already bound (constants are in its text), ``target`` the text of the target's
    config."""
    from relay_ir.passes.pass_manager import PassContext
    from relay_ir.printer import astext
    h = hashlib.sha256()
    h.update(f"{code_digest()}|{settings_digest()}|".encode())
    h.update(target.encode())
    h.update(f"|{entry}|{opt_level}|{max_fuse_depth}|{fast_math}|".encode())
    # NOTE: optimize reads the current PassContext's config (e.g. unsafe_math)
    h.update(repr(sorted(PassContext.current().config.items(), key=str)).encode())
    h.update(astext(mod).encode())
    return h.hexdigest()[:40]


def entry_path(directory: str, key: str) -> str:
    """Where the module file of ``key`` is kept."""
    return os.path.join(directory, SUBDIR, f"build-{key}.so")


def lookup(path: str, rebuild: Callable[[], Any], source: Any = None) -> Any:
    """The :class:`CachedBuild` of the module file at ``path``, or None (no usable entry:
    a bad one is deleted). ``source``: the module ``runtime.build`` was given (params bound),
    whose entries' spans the hit's argument errors point at."""
    if not os.path.exists(path):
        return None
    try:
        # NOTE: load_module's checks (size, checksums, format and TVM version) but not the
        # target's: the key holds it, and building a Target costs more than the rest
        meta, lib = _verify(path, _read(path))
        counts = _read_counts(path)
        loaded = _load(path, meta, lib, check_target=False)
    except DiagnosticError:
        STATS["rebuilt_corrupt"] += 1
        for p in (path, path + ".json"):
            try:
                os.remove(p)
            except OSError:
                pass
        return None
    try:
        os.utime(path)          # NOTE: recently used: the last to be evicted
    except OSError:
        pass
    return CachedBuild(loaded, path, rebuild, counts, source)


def size_limit() -> float:
    """The most bytes the cache's module files may take (``RELAY_IR_BUILD_CACHE_MB``, MiB;
    default 4096; an unreadable value means the default)."""
    from relay_ir.runtime.kernel_cache import size_limit_mb
    return size_limit_mb(SIZE_ENV_VAR, DEFAULT_SIZE_MB)


def evict(directory: str, keep: str) -> int:
    """Delete the least recently used entries of ``directory`` (a hit or a store counts as a
    use) until its module files take at most :func:`size_limit`; never ``keep``. The number
    deleted. A process that loaded a deleted entry keeps running it (the file is unlinked,
    not changed)."""
    from relay_ir.runtime.kernel_cache import evict_lru
    n = evict_lru(directory, "build-", ".so", size_limit(), keep, companion=".json")
    STATS["evicted"] += n
    return n


def _read_counts(path: str) -> dict[str, Any]:
    """The built executable's counts kept next to its module file (``<file>.json``)."""
    import json
    try:
        with open(path + ".json", encoding="utf-8") as f:
            counts = json.load(f)
        if not (isinstance(counts, dict) and type(counts.get("num_kernels")) is int and
                type(counts.get("num_compiled")) is int and
                isinstance(counts.get("host_kernels"), list)):
            raise ValueError("malformed")
    except (OSError, ValueError) as e:
        raise DiagnosticError(f"{path}.json: unreadable build counts ({e})") from None
    return counts


def store(path: str, exe: Any) -> bool:
    """Export ``exe`` to ``path`` (atomically; failures leave no entry and are not errors)."""
    import json
    counts = {"num_kernels": exe.num_kernels(), "num_compiled": exe.num_compiled(),
              "host_kernels": exe.host_kernels()}
    from relay_ir.runtime.kernel_cache import write_atomic
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # NOTE: the counts first, so that a module file has its counts
        write_atomic(path + ".json", json.dumps(counts))
        exe.export_library(path)
    except (DiagnosticError, OSError):
        return False
    STATS["stored"] += 1
    evict(os.path.dirname(path), keep=path)
    return True


class CachedBuild(LoadedRelaxModule):
    """``runtime.build``'s result on a whole-build cache hit: the cached module file,
    loaded; runs exactly as the built executable. What needs the compiler's objects
    (``module``, ``kernel_sources``, ``run_batch``, exporting another entry or
    ``batched=True``) builds the module once more on first use (:meth:`built`)."""

    def __init__(self, loaded: Any, path: str, rebuild: Callable[[], Any],
                 counts: dict[str, Any], source: Any = None):
        self.__dict__.update(loaded.__dict__)
        self._source = source
        self._counts = counts
        self.__dict__.pop("module", None)
        self.cache_path = path
        self._rebuild = rebuild
        self._built: Any = None

    def built(self) -> Any:
        """The executable ``runtime.build`` makes without the cache (built once)."""
        if self._built is None:
            self._built = self._rebuild()
        return self._built

    @property
    def module(self) -> Any:         # type: ignore[override]
        """The fused module the executable was compiled from (builds it: :meth:`built`)."""
        return self.built().module

    def _where(self) -> str:
        return ""           # NOTE: as the built executable's messages (no cache file path)

    def _entry_types(self, entry: str) -> tuple[Any, list, list[str] | None]:
        """As the built executable's: the entry of the module ``runtime.build`` was given, so
        that an argument error points at its parameter in the user's source."""
        ptypes, names = self._types(entry)
        src = self._source
        fn = src.functions.get(entry) if src is not None else None
        if fn is not None and len(fn.params) == len(ptypes):
            return fn, ptypes, None
        return None, ptypes, names

    def kernel_sources(self) -> list[str]:
        return self.built().kernel_sources()

    def num_kernels(self) -> int:
        """As the built executable's (kept with the entry)."""
        return int(self._counts["num_kernels"])

    def num_compiled(self) -> int:
        """As the built executable's (kept with the entry)."""
        return int(self._counts["num_compiled"])

    def host_kernels(self) -> list[str]:
        """As the built executable's (kept with the entry)."""
        return [str(k) for k in self._counts["host_kernels"]]

    def run_batch(self, arg_tuples: Any, entry: str | None = None) -> list:
        return self.built().run_batch(arg_tuples, entry)

    def batch_stats(self) -> dict[str, int]:
        return self.built().batch_stats() if self._built is not None else {}

    def export_library(self, path: str, entry: str | None = None,
                       batched: bool = False) -> None:
        if batched or (entry is not None and entry != self.default_entry):
            self.built().export_library(path, entry, batched=batched)
            return
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            shutil.copyfile(self.cache_path, tmp)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.remove(tmp)
            except OSError:
                pass
            if not os.path.exists(self.cache_path):
                # NOTE: the entry went away (cache cleared): export a fresh build
                self.built().export_library(path, entry, batched=batched)
                return
            raise DiagnosticError(f"cannot write the module file {path}: "
                                  f"{e.strerror or e}") from None


def clear(directory: str) -> int:
    """Delete every cached build under the kernel cache ``directory``; the number removed."""
    from relay_ir.runtime.kernel_cache import remove_entries
    return remove_entries(directory, SUBDIR, "build-")
