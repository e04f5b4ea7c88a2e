"""The kernel cache: compiled kernels by structural hash, shapes, dtypes and target.

Two levels:

* in memory (per process): key -> the loaded kernel function, confirmed with
  ``tvm_ffi.structural_equal`` against the stored PrimFunc;
* on disk (default ``~/.cache/relay_ir/kernels``, moved by ``RELAY_IR_CACHE_DIR``): the
  kernels compiled together in one build are one shared library ``lib-<id>-<unique>.so``
  (a fresh path each time: see :meth:`KernelCache._store`), from which this process also
  runs them; each kernel has an entry ``<key>.json`` naming its library, its symbol and the
  library's SHA-256 (and the library's object file ``lib-....o`` with its SHA-256: what
``runtime.relax_export`` links into an exported module). The checksum is verified before a
library is loaded: a missing,
  truncated or altered library (loading one can crash the process) or an unreadable entry is
  deleted and rebuilt, never loaded.

Key = SHA-256 of (cache format version, a digest of the scheduling code and the TVM version,
``tvm_ffi.structural_hash`` of the unscheduled PrimFunc, the input and output shapes and
dtypes, ``str(target)``). Scheduling and
``tvm.compile`` happen only for misses; all misses of one request are compiled by one
``tvm.compile`` call (:data:`COMPILE_COUNT` counts them) and exported as one library.
CUDA kernels are cached in memory only (their libraries hold CUDA source that must be
recompiled on a GPU machine anyway).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

FORMAT_VERSION = 1
ENV_VAR = "RELAY_IR_CACHE_DIR"

# Number of tvm.compile calls made by this process (tests assert on it).
COMPILE_COUNT = [0]


def cache_dir() -> str:
    """The on-disk cache directory (``$RELAY_IR_CACHE_DIR`` or ``~/.cache/relay_ir/kernels``)."""
    d = os.environ.get(ENV_VAR)
    if d:
        return os.path.abspath(os.path.expanduser(d))
    return os.path.join(os.path.expanduser("~"), ".cache", "relay_ir", "kernels")


_SOURCE: list[str] = []


def write_atomic(path: str, *parts: bytes | str) -> None:
    """Write ``parts`` (bytes, or text as UTF-8) to ``path`` through a temporary file renamed
    over it, so that a reader never sees a partial file; on failure the temporary is removed
    and the ``OSError`` raised."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part.encode() if isinstance(part, str) else part)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def remove_entries(directory: str, subdir: str, prefix: str) -> int:
    """Delete the files named ``prefix*`` in ``directory/subdir`` (a pipeline cache's entries:
    ``runtime.build_cache``, ``passes.optimize_cache``); the number removed."""
    d = os.path.join(directory, subdir)
    n = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix):
            try:
                os.remove(os.path.join(d, name))
                n += 1
            except OSError:
                pass
    return n


def size_limit_mb(env_var: str, default_mb: float) -> float:
    """The byte limit in ``env_var`` (MiB; ``default_mb`` when unset or unreadable)."""
    try:
        mb = float(os.environ.get(env_var, default_mb))
    except ValueError:
        mb = default_mb
    return max(mb, 0.0) * 2 ** 20


def evict_lru(directory: str, prefix: str, suffix: str, limit: float, keep: str,
              companion: str = "") -> int:
    """Delete the least recently used files ``prefix*suffix`` of ``directory`` (by
    modification time: a pipeline cache touches an entry on a hit) until they take at most
    ``limit`` bytes; never ``keep``; each with its ``<file><companion>`` when given. The
    number deleted."""
    entries = []
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix) and name.endswith(suffix):
            p = os.path.join(directory, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(e[1] for e in entries)
    n = 0
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        if p == keep:
            continue
        for q in (p, p + companion) if companion else (p,):
            try:
                os.remove(q)
            except OSError:
                pass
        total -= size
        n += 1
    return n


def source_digest() -> str:
    """A digest of relay_ir's code: its version, Python's version, and the path, size and
    modification time of every source file (``.py``, ``.lark``) of the ``relay_ir``,
    ``relay_ir.passes``, ``relay_ir.runtime`` and ``relay_ir.grammar`` packages. The
    pipeline caches (``runtime.build_cache``, ``passes.optimize_cache``) key on it, so an
    edited or reinstalled relay_ir never reuses their entries. Computed once per process."""
    if not _SOURCE:
        import sys

        import relay_ir
        import relay_ir.grammar
        import relay_ir.passes
        import relay_ir.runtime
        h = hashlib.sha256(f"{relay_ir.__version__}|{sys.version}".encode())
        for pkg in (relay_ir, relay_ir.passes, relay_ir.runtime, relay_ir.grammar):
            root = os.path.abspath(list(pkg.__path__)[0])
            stack = [root]
            while stack:
                top = stack.pop()
                try:
                    entries = sorted(os.scandir(top), key=lambda e: e.name)
                except OSError:
                    continue
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        if e.name != "__pycache__":
                            stack.append(e.path)
                    elif e.name.endswith((".py", ".lark")):
                        st = e.stat()
                        h.update(f"{pkg.__name__}/{os.path.relpath(e.path, root)}|"
                                 f"{st.st_size}|{st.st_mtime_ns}\n".encode())
        _SOURCE.append(h.hexdigest())
    return _SOURCE[0]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_SCHED_VERSION: list[str] = []


def _schedule_version() -> str:
    """A digest of the scheduling code: kernels scheduled by older code are never reused."""
    if not _SCHED_VERSION:
        from relay_ir.runtime import schedules
        h = hashlib.sha256()
        with open(schedules.__file__, "rb") as f:
            h.update(f.read())
        import tvm
        h.update(tvm.__version__.encode())
        _SCHED_VERSION.append(h.hexdigest()[:16])
    return _SCHED_VERSION[0]


@dataclass
class KernelRequest:
    """One kernel to get: its key material and how to schedule it on a miss."""

    prim_func: Any                      # the unscheduled PrimFunc (hashed)
    signature: str                      # shapes and dtypes of inputs and outputs
    make_scheduled: Callable[[], Any]   # -> IRModule with the scheduled "main"
    label: str = ""                     # for error messages (the ops of the group)
    key: str = ""                       # filled in by KernelCache.get
    # a simpler schedule tried when the first one does not compile (None: no second try)
    make_fallback: Callable[[], Any] | None = None


@dataclass
class CacheStats:
    """Counters of one cache object (memory hits, disk hits, compiled kernels)."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiled: int = 0
    rebuilt_corrupt: int = 0
    schedule_s: float = 0.0     # seconds spent scheduling misses
    compile_s: float = 0.0      # ... in tvm.compile
    export_s: float = 0.0       # ... writing libraries (export_library runs the C++ linker)


class KernelCache:
    """In-memory and on-disk cache of compiled kernels (see the module docstring)."""

    def __init__(self, directory: str | None = None, use_disk: bool = True):
        self._directory = directory
        self.use_disk = use_disk
        self._memory: dict[str, tuple[Any, Any]] = {}
        self._libs: dict[str, Any] = {}          # verified library path -> loaded module
        self.modules: dict[str, Any] = {}        # key -> runtime module that compiled it
        self._lib_of: dict[str, str] = {}
        self._obj_of: dict[str, tuple[str, str]] = {}   # key -> (object file, its SHA-256)
        self._lock = threading.Lock()
        self.stats = CacheStats()

    @property
    def directory(self) -> str:
        """The directory in use (resolved from the environment when not given)."""
        return self._directory or cache_dir()

    # ------------------------------------------------------------------ keys
    @staticmethod
    def key(prim_func: Any, signature: str, target: Any) -> str:
        """The cache key of a PrimFunc with its signature for ``target``."""
        import tvm_ffi
        h = tvm_ffi.structural_hash(prim_func)
        text = f"{FORMAT_VERSION}|{_schedule_version()}|{h}|{signature}|{target}"
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    # ------------------------------------------------------------------ lookup
    def get(self, requests: list[KernelRequest], target: Any) -> list[Any]:
        """The kernel function of every request, compiling the misses together."""
        import tvm_ffi
        from relay_ir.runtime.lower_tvm import is_cuda
        disk = self.use_disk and not is_cuda(target)
        keys = []
        memo: dict[int, str] = {}
        for r in requests:
            # NOTE: requests of one build often share a PrimFunc object (repeated layers)
            k = memo.get(id(r.prim_func))
            if k is None:
                k = memo[id(r.prim_func)] = self.key(r.prim_func, r.signature, target)
            r.key = k
            keys.append(k)
        out: list[Any] = [None] * len(requests)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, (r, k) in enumerate(zip(requests, keys)):
                hit = self._memory.get(k)
                if hit is not None and tvm_ffi.structural_equal(hit[0], r.prim_func):
                    out[i] = hit[1]
                    self.stats.memory_hits += 1
                    continue
                if disk:
                    fn = self._load_from_disk(k)
                    if fn is not None:
                        self._memory[k] = (r.prim_func, fn)
                        self.modules[k] = self._libs.get(self._lib_of.get(k, ""))
                        out[i] = fn
                        self.stats.disk_hits += 1
                        continue
                missing.setdefault(k, []).append(i)
            if missing:
                self._compile(requests, missing, target, disk, out)
        return out

    def _load_from_disk(self, key: str) -> Any | None:
        d = self.directory
        entry = os.path.join(d, key + ".json")
        if not os.path.exists(entry):
            return None
        try:
            with open(entry, encoding="utf-8") as f:
                meta = json.load(f)
            lib = os.path.join(d, os.path.basename(meta["lib"]))
            symbol = str(meta["symbol"])
            digest = str(meta["sha256"])
            if meta.get("version") != FORMAT_VERSION or meta.get("key") != key:
                raise ValueError("stale entry")
            obj = meta.get("obj")
            if obj:
                self._obj_of[key] = (os.path.join(d, os.path.basename(str(obj))),
                                     str(meta["obj_sha256"]))
        except (OSError, ValueError, KeyError, TypeError):
            self._discard(entry, None)
            self.stats.rebuilt_corrupt += 1
            return None
        mod = self._libs.get(lib)
        if mod is None:
            try:
                ok = os.path.exists(lib) and _sha256_file(lib) == digest
            except OSError:
                ok = False
            if not ok:
                # NOTE: never load an unverified library: a truncated .so crashes dlopen.
                self._discard(entry, lib)
                self.stats.rebuilt_corrupt += 1
                return None
            import tvm
            try:
                mod = tvm.runtime.load_module(lib)
            except Exception:
                self._discard(entry, lib)
                self.stats.rebuilt_corrupt += 1
                return None
            self._libs[lib] = mod
        self._lib_of[key] = lib
        try:
            return mod[symbol]
        except Exception:
            self._discard(entry, None)
            self.stats.rebuilt_corrupt += 1
            return None

    @staticmethod
    def _discard(entry: str, lib: str | None) -> None:
        for p in (entry, lib, lib[:-3] + ".o" if lib and lib.endswith(".so") else None):
            if p:
                try:
                    os.remove(p)
                except OSError:
                    pass

    # ------------------------------------------------------------------ compile
    def _compile(self, requests: list[KernelRequest], missing: dict[str, list[int]],
                 target: Any, disk: bool, out: list[Any]) -> None:
        import tvm
        from relay_ir.errors import LoweringError
        funcs = {}
        t0 = time.perf_counter()
        for k, idxs in missing.items():
            r = requests[idxs[0]]
            mod = r.make_scheduled()
            f = mod["main"].with_attr("global_symbol", "k_" + k)
            funcs["k_" + k] = f
        irmod = tvm.IRModule(funcs)
        COMPILE_COUNT[0] += 1
        t1 = time.perf_counter()
        self.stats.schedule_s += t1 - t0
        try:
            ex = tvm.compile(irmod, target=target)
            self.stats.compile_s += time.perf_counter() - t1
        except Exception as e:
            # find the group(s) that fail on their own; retry those with their fallback
            # schedule, else name them (first line of TVM's message)
            bad = []
            for k, idxs in missing.items():
                r = requests[idxs[0]]
                try:
                    tvm.compile(tvm.IRModule({"main": funcs["k_" + k]}), target=target)
                    continue
                except Exception as e1:
                    err = e1
                if r.make_fallback is not None:
                    try:
                        f = r.make_fallback()["main"].with_attr("global_symbol", "k_" + k)
                        tvm.compile(tvm.IRModule({"main": f}), target=target)
                        funcs["k_" + k] = f
                        continue
                    except Exception as e2:
                        err = e2
                msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
                bad.append(f"{r.label} ({type(err).__name__}: {msg})")
            if bad or len(funcs) == 0:
                raise LoweringError(f"tvm.compile failed for {target.kind.name}: "
                                    f"{'; '.join(bad) or str(e)[:500]}") from e
            COMPILE_COUNT[0] += 1
            ex = tvm.compile(tvm.IRModule(funcs), target=target)
            self.stats.compile_s += time.perf_counter() - t1
        self.stats.compiled += len(missing)
        # NOTE: functions come from the library just written when there is one: the
        # in-memory module would JIT-compile its machine code a second time (~0.3 s for the
        # W2 step's kernels). The module kept is the in-memory one (its LLVM source stays
        # inspectable; it exports as before).
        loaded = None
        if disk:
            t2 = time.perf_counter()
            lib = self._store(ex, list(missing))
            self.stats.export_s += time.perf_counter() - t2
            if lib is not None:
                import tvm
                try:
                    loaded = self._libs[lib] = tvm.runtime.load_module(lib)
                except Exception:  # pragma: no cover - just written: fall back to the JIT
                    loaded = None
        for k, idxs in missing.items():
            fn = None
            if loaded is not None:
                fn = loaded["k_" + k]
                self._lib_of[k] = lib
            if fn is None:
                fn = ex["k_" + k]
            self.modules[k] = ex.mod
            self._memory[k] = (requests[idxs[0]].prim_func, fn)
            for i in idxs:
                out[i] = fn

    def _store(self, ex: Any, keys: list[str]) -> str | None:
        """Export the compiled kernels as one library with an entry per key; its path, or None
        (with a warning) when the directory cannot be written."""
        d = self.directory
        try:
            os.makedirs(d, exist_ok=True)
            lib_id = hashlib.sha256("|".join(sorted(keys)).encode()).hexdigest()[:24]
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=d)
            os.close(fd)
            ws = tempfile.mkdtemp(dir=d)
            try:
                ex.export_library(tmp, workspace_dir=ws)
                # NOTE: every library gets a path of its own: dlopen of a path already loaded
                # in this process returns the old library, even after the file was replaced
                lib = os.path.join(d, f"lib-{lib_id}-{os.path.basename(tmp)[3:]}")
                os.replace(tmp, lib)
                # the linker's input, kept: exported Relax modules link it (no recompile)
                objs = [f for f in os.listdir(ws) if f.endswith(".o")]
                obj = None
                if len(objs) == 1:
                    obj = lib[:-3] + ".o"
                    os.replace(os.path.join(ws, objs[0]), obj)
            finally:
                shutil.rmtree(ws, ignore_errors=True)
            digest = _sha256_file(lib)
            obj_digest = _sha256_file(obj) if obj else ""
            for k in keys:
                meta = {"version": FORMAT_VERSION, "key": k, "lib": os.path.basename(lib),
                        "symbol": "k_" + k, "sha256": digest, "created": time.time()}
                if obj:
                    meta["obj"] = os.path.basename(obj)
                    meta["obj_sha256"] = obj_digest
                    self._obj_of[k] = (obj, obj_digest)
                fd, tmpj = tempfile.mkstemp(suffix=".json", dir=d)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(meta, f)
                os.replace(tmpj, os.path.join(d, k + ".json"))
            return lib
        except Exception as e:  # NOTE: a read-only or full disk must not fail the build
            warnings.warn(f"relay_ir: could not write the kernel cache in {d}: {e}",
                          RuntimeWarning, stacklevel=3)
            return None

    def replace(self, request: KernelRequest, scheduled: Any, target: Any) -> Any:
        """Compile ``scheduled`` (an IRModule holding one scheduled PrimFunc of
        ``request``'s kernel: a tuned schedule, ``runtime.tune``) and make it the kernel of
        ``request``'s key, in memory and on disk; later lookups of the key get it."""
        import tvm
        key = request.key or self.key(request.prim_func, request.signature, target)
        (gv, f), = list(scheduled.functions_items())
        irmod = tvm.IRModule({"k_" + key: f.with_attr("global_symbol", "k_" + key)})
        COMPILE_COUNT[0] += 1
        ex = tvm.compile(irmod, target=target)
        self.stats.compiled += 1
        fn = None
        with self._lock:
            from relay_ir.runtime.lower_tvm import is_cuda
            if self.use_disk and not is_cuda(target):
                lib = self._store(ex, [key])
                if lib is not None:
                    loaded = self._libs[lib] = tvm.runtime.load_module(lib)
                    fn = loaded["k_" + key]
                    self._lib_of[key] = lib
            if fn is None:
                fn = ex["k_" + key]
            self.modules[key] = ex.mod
            self._memory[key] = (request.prim_func, fn)
        return fn

    def object_of(self, key: str) -> str | None:
        """The verified object file (``.o``) holding kernel ``key``'s code, or None."""
        got = self._obj_of.get(key)
        if got is None:
            return None
        path, digest = got
        try:
            ok = os.path.isfile(path) and _sha256_file(path) == digest
        except OSError:
            ok = False
        if not ok:
            del self._obj_of[key]
            return None
        return path

    def library_of(self, key: str) -> str | None:
        """The verified library file this process runs the kernel ``key`` from (or None)."""
        lib = self._lib_of.get(key)
        return lib if lib and os.path.isfile(lib) else None

    # ------------------------------------------------------------------ management
    def clear_memory(self) -> None:
        """Forget the kernels held in memory (the disk cache stays)."""
        with self._lock:
            self._memory.clear()
            self._libs.clear()
            self.modules.clear()
            self._lib_of.clear()
            self._obj_of.clear()


def disk_usage(directory: str | None = None) -> tuple[int, int, int]:
    """(number of kernel entries, number of libraries, total bytes) in the cache directory."""
    d = directory or cache_dir()
    entries = libs = total = 0
    if not os.path.isdir(d):
        return 0, 0, 0
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if not os.path.isfile(p):
            continue
        if name.endswith(".json"):
            entries += 1
        elif name.endswith(".so"):
            libs += 1
        total += os.path.getsize(p)
    return entries, libs, total


def clear_disk(directory: str | None = None) -> int:
    """Delete every cache file (entries, libraries, leftovers); returns how many."""
    d = directory or cache_dir()
    n = 0
    if not os.path.isdir(d):
        return 0
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.isfile(p) and (name.endswith((".json", ".so", ".o", ".lark"))
                                  or name.startswith("tmp")):
            os.remove(p)
            n += 1
        elif os.path.isdir(p) and name.startswith("tmp"):
            shutil.rmtree(p, ignore_errors=True)   # NOTE: a linker workspace left by a crash
            n += 1
        elif os.path.isdir(p) and name in PIPELINE_SUBDIRS:
            n += remove_entries(d, name, "")
    _DEFAULT.clear_memory()
    return n


#: subdirectories of the pipeline caches: whole builds (``runtime.build_cache``) and
#: optimized modules (``passes.optimize_cache``)
PIPELINE_SUBDIRS = ("builds", "optimize")


def pipeline_usage(directory: str | None = None) -> dict[str, tuple[int, int]]:
    """For each pipeline cache subdirectory: (number of entries, total bytes)."""
    d = directory or cache_dir()
    out = {}
    for sub in PIPELINE_SUBDIRS:
        n = total = 0
        p = os.path.join(d, sub)
        if os.path.isdir(p):
            for name in os.listdir(p):
                q = os.path.join(p, name)
                if os.path.isfile(q):
                    n += name.endswith(".so" if sub == "builds" else ".json")
                    total += os.path.getsize(q)
        out[sub] = (n, total)
    return out


_DEFAULT = KernelCache()


def default_cache() -> KernelCache:
    """The process-wide cache used by ``runtime.build``."""
    return _DEFAULT
