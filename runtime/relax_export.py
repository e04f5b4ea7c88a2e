"""Relax VM executables as standard TVM modules: export, verification, loading.

:meth:`RelaxExecutable.export_library(path) <relay_ir.runtime.relax_vm.RelaxExecutable>`
writes **one shared library** that plain TVM runs, without relay_ir::

    lib = tvm.runtime.load_module(path)
    vm = tvm.relax.VirtualMachine(lib, tvm.cpu())     # target cuda: tvm.cuda(0)
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])

The library holds the Relax VM bytecode (TVM's own serialization of the executable, packed
into the library as ``export_library`` does for every TVM executable), the machine code of
every kernel and the depth-counting TIR functions. The kernels' code comes from the kernel
cache's object file of the library they run from (kept next to it, checksummed: a shared
library cannot be linked into another one), else from the in-memory module they were
compiled into (``KernelCache(use_disk=False)``), else they are compiled again from their
scheduled TIR.

**Functions of the library** (``vm[name]``):

* ``<global>`` for every global of the program (``main``, ...): the plain entry. It takes
  the global's parameters and nothing else; it resets the depth counter with the limit
  :data:`~relay_ir.runtime.relax_vm.PLAIN_DEPTH` (non-tail calls a default 8 MiB thread stack
  holds), so past that depth a call fails with a TVM error saying
  ``relay_ir: recursion depth limit reached`` instead of overflowing the stack.
* ``__rly_entry_<global>`` (the same with a first argument ``[0, limit]`` int64, the depth
  limit -- an int for a cuda module, whose counter is static: ``runtime.relax_cuda`` -- how
  relay_ir's loader calls it, on a large-stack thread when needed),
  ``__rly_fn_<global>`` (the global's own function) and other ``__rly_*`` helpers.

**Calling convention** (what ``vm[name]`` takes and returns): a tensor is a
``tvm.runtime.Tensor`` (on ``tvm.cpu()``; 0-d for scalars: ``tvm.runtime.tensor(np.array(3,
"int64"))``); a tuple is a Python tuple/list of values (returned: a ``tvm_ffi.Array``); an
ADT value is a tuple ``(tag, field0, field1, ...)`` whose tag is a Python int, the
constructor's index in the module's constructor table (:func:`read_metadata` lists it under
``constructors``: ``[type, constructor, tag in the type, arity]`` at index = the VM tag);
a reference is a one-element ``tvm_ffi.List``; a function value returned by the program is a
VM closure (``vm.invoke_closure(closure, *args)`` calls it).

**The trailer.** relay_ir's description of the module follows the ELF image (the dynamic
loader maps the library by its program headers and ignores trailing bytes)::

    L bytes   the shared library
    H bytes   metadata: UTF-8 JSON (format, version, target, default entry, entries with
              parameter names and types and result type, constructors, kernel symbols)
    u64 L     u64 H     32 B SHA-256 of the library     32 B SHA-256 of the metadata
    u32       format version (:data:`FORMAT_VERSION`)
    8 B       magic :data:`TRAILER_MAGIC`

:func:`load_module` checks the magic, the version, the sizes, both checksums, the metadata and
the target **before** anything is handed to ``dlopen`` (a truncated library crashes the
process), then loads a private copy of the verified bytes. Module files of the old Python VM
(magic ``RLYMOD``) are refused ("rebuild it").
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
from types import SimpleNamespace
from typing import Any, Iterator


from relay_ir.errors import DiagnosticError, LoweringError
from relay_ir.runtime.relax_vm import _ENTRY, PLAIN_DEPTH, RelaxExecutable
from relay_ir.runtime.vm import ModuleFileError, _type_from_json, _type_to_json

TRAILER_MAGIC = b"RLYRELAX"
FORMAT_VERSION = 1
FORMAT_NAME = "relay_ir.relax_module"
_FOOTER = struct.Struct("<QQ32s32sI8s")
_TAIL = struct.Struct("<I8s")        # the footer's last fields: always readable
# TVM's executable (de)serializer logs a warning line per string constant ("Scope Saving: ..."
# / "Scope Loaded: ..."): noise for the user; every other line of its log is passed on
_NOISE = (b"Warning: Scope Saving", b"Warning: Scope Loaded")


@contextlib.contextmanager
def _tvm_log_filtered() -> Iterator[None]:
    """Run a TVM call with the C++ log (stderr, fd 2) captured; lines other than the
    executable serializer's noise are written back to stderr afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as cap:
        os.dup2(cap.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            cap.seek(0)
            kept = [ln for ln in cap.read().splitlines(keepends=True)
                    if not any(n in ln for n in _NOISE)]
            if kept:
                os.write(2, b"".join(kept))


# ============================================================================ export
def export_library(rexe: RelaxExecutable, path: str, entry: str | None = None,
                   batched: bool = False) -> None:
    """Write ``rexe`` as one TVM shared library with relay_ir's trailer (module docstring).

    ``entry``: the global a call of the loaded module runs by default (default: the entry
    the executable was built for). ``batched``: also write what ``run_batch`` needs on the
    loaded module -- the program (Relay text, compiled again to the instruction program at
    load), each static kernel's calling information, and the batched kernels (symbolic batch
    size, one thread) that ``rexe.run_batch`` compiled so far, linked into the library
    (``runtime.batching.batch_metadata``; docs/batching.md).
    """
    backend = getattr(rexe, "_backend", None)
    if backend is None or getattr(backend, "executable", None) is None:
        raise DiagnosticError("a loaded module cannot be exported again; export the "
                              "runtime.build result")
    entry = entry or rexe.entry
    if entry not in rexe.module:
        raise DiagnosticError(f"there is no global function @{entry} to export (globals: "
                              f"{', '.join('@' + n for n in rexe.module)})")
    path = os.fspath(path)
    extra: list = []
    batch_meta = None
    if batched:
        if rexe._cuda:
            raise DiagnosticError("export_library(batched=True): run_batch supports target "
                                  "llvm only")
        from relay_ir.runtime.batching import batch_metadata
        batch_meta, extra = batch_metadata(rexe)
    work = tempfile.mkdtemp(prefix="relay_ir_export_")
    try:
        with _tvm_log_filtered():
            lib = _link(backend, work, extra)
    except DiagnosticError:
        raise
    except Exception as e:   # NOTE: TVM's errors (writing the bytecode, compiling a kernel)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DiagnosticError(f"export_library failed: {type(e).__name__}: {msg}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = _metadata(rexe, entry)
    if batch_meta is not None:
        data["batch"] = batch_meta
    meta = json.dumps(data, separators=(",", ":")).encode()
    footer = _FOOTER.pack(len(lib), len(meta), hashlib.sha256(lib).digest(),
                          hashlib.sha256(meta).digest(), FORMAT_VERSION, TRAILER_MAGIC)
    from relay_ir.runtime.kernel_cache import write_atomic
    try:
        write_atomic(path, lib, meta, footer)
    except OSError as e:
        raise DiagnosticError(f"cannot write the module file {path}: {e.strerror or e}") \
            from None


def _link(backend: Any, work: str, extra: list = ()) -> bytes:
    """The shared library: the executable's bytecode, re-read into a fresh executable (the
    built one imports the cache's libraries, which cannot be packed), importing the depth
    functions and compiled modules holding every kernel."""
    import tvm_ffi
    code = os.path.join(work, "bytecode.vmexec")
    backend.executable.mod.write_to_file(code)
    fresh = tvm_ffi.get_global_func("ffi.Module.load_from_file.relax.VMExecutable")
    depth_lib = backend.depth_library(exportable=True)
    so = os.path.join(work, "module.so")
    kernels = list(backend.kernels.values()) + list(extra)
    target = backend.exe.target
    first_try = _kernel_code(kernels, target, backend.exe.cache)
    for attempt in (first_try, None):
        exec_mod = fresh(code)
        exec_mod.import_module(depth_lib)
        mods, objs = attempt if attempt is not None else (_recompiled(kernels, target), [])
        for m in mods:
            exec_mod.import_module(m)
        try:
            exec_mod.export_library(so, addons=list(objs))
            break
        except Exception as e:
            if attempt is None:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise DiagnosticError(f"export_library: linking the module failed: "
                                      f"{msg}") from None
            # NOTE: two modules or object files defining one kernel (compiled twice, in two
            # batches): one fresh module of all of them instead
    with open(so, "rb") as f:
        return f.read()


def _kernel_code(kernels: list, target: Any, cache: Any) -> tuple[list, list[str]]:
    """(modules, object files) holding every kernel's code: the kernel cache's verified
    object file of their library, else the in-memory module they were compiled into, else
    one module compiled now for the rest."""
    mods: list = []
    objs: list[str] = []
    seen: set[Any] = set()
    rest = []
    for kern in kernels:
        dyn = kern.dyn
        if dyn is not None:
            if dyn.mode == "host":
                continue        # NOTE: its text goes into the metadata (host_groups)
            # a symbolic kernel: its kernel, serial twin and shape/guard functions
            for m in dyn.modules:
                key = dyn.cache_keys.get(id(m))
                obj = cache.object_of(key) if key and hasattr(cache, "object_of") else None
                if obj is not None:
                    if obj not in seen:
                        seen.add(obj)
                        objs.append(obj)
                elif m is not None and m.kind == "llvm":
                    if id(m) not in seen:
                        seen.add(id(m))
                        mods.append(m)
                elif key and id(m) in getattr(dyn, "requests", {}):
                    # NOTE: a library of the kernel cache without its object file (written
                    # by an older relay_ir): compiled again from its request
                    if key not in seen:
                        seen.add(key)
                        rest.append(SimpleNamespace(symbol="k_" + key, label=kern.label,
                                                    request=dyn.requests[id(m)]))
                else:
                    raise DiagnosticError(
                        f"export_library: the symbolic kernel of {kern.label} was loaded "
                        f"from a kernel-cache library without its object file; clear the "
                        f"cache (rly cache --clear) and build again")
            continue
        # NOTE: an object file first: a module in memory is compiled to one again (LLVM's
        # code generation: 3-4x the time of the link alone)
        obj = None
        if kern.request is not None and hasattr(cache, "object_of"):
            obj = cache.object_of(kern.request.key)
        if obj is not None:
            if obj not in seen:
                seen.add(obj)
                objs.append(obj)
            continue
        m = kern.module
        if m is not None and m.kind == "llvm" and m.implements_function(kern.symbol):
            if id(m) not in seen:
                seen.add(id(m))
                mods.append(m)
            continue
        rest.append(kern)
    if rest:
        mods.extend(_recompiled(rest, target))
    return mods, objs


def _recompiled(kernels: list, target: Any) -> list:
    """One module with ``kernels`` compiled again from their scheduled TIR (the schedule
    the kernel cache used; its fallback where that does not compile)."""
    import tvm
    funcs: dict[str, Any] = {}
    for kern in kernels:
        if kern.symbol in funcs:
            continue
        req = kern.request
        if req is None:
            raise DiagnosticError(f"export_library: the kernel {kern.label} has no compiled "
                                  f"code to export")
        f = req.make_scheduled()["main"].with_attr("global_symbol", kern.symbol)
        funcs[kern.symbol] = (f, req)
    if not funcs:
        return []
    try:
        return [tvm.compile(tvm.IRModule({k: f for k, (f, _) in funcs.items()}),
                            target=target).mod]
    except Exception:
        out = {}
        for k, (f, req) in funcs.items():
            try:
                tvm.compile(tvm.IRModule({k: f}), target=target)
            except Exception:
                if req.make_fallback is None:
                    raise
                f = req.make_fallback()["main"].with_attr("global_symbol", k)
            out[k] = f
        return [tvm.compile(tvm.IRModule(out), target=target).mod]


def _tvm_release(version: str) -> str:
    """``major.minor`` of a TVM version string (the bytecode and runtime ABI it goes with)."""
    return ".".join(str(version).split(".")[:2])


def _metadata(rexe: RelaxExecutable, entry: str) -> dict:
    import tvm
    from relay_ir.runtime.lower_tvm import target_description
    entries = {}
    for name in rexe.module:
        fn = rexe.module[name]
        ptypes = [p.checked_type_ or p.type_annotation for p in fn.params]
        ret = fn.ret_type
        if ret is None:
            ret = getattr(getattr(fn, "checked_type_", None), "ret_type", None)
        # NOTE: the shape variables of one entry share names: `n` in two parameters is one
        # dimension after loading too
        entries[name] = {"names": [p.name_hint for p in fn.params],
                         "types": [_type_to_json(t) for t in ptypes],
                         "result": _type_to_json(ret)}
    cons = [[c.belong_to.name_hint, c.name_hint, int(c.tag), len(c.inputs)]
            for c in rexe._cons]
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "target": target_description(rexe.target), "tvm_version": tvm.__version__,
            "default_entry": entry, "entries": entries, "constructors": cons,
            "plain_depth": PLAIN_DEPTH,
            # NOTE: the depth counter in static words of rly_depth (runtime.relax_cuda): the
            # entries take the limit as an int
            "static_depth": bool(rexe._backend.static_depth),
            "kernels": sorted({k.symbol for k in rexe._backend.kernels.values()
                               if k.dyn is None or k.dyn.mode != "host"}),
            # the groups that run on the host (key -> [label, Relay text]): such a module
            # loads only through relay_ir (runtime.relax_shapes.register_loaded_groups)
            "host_groups": dict(getattr(rexe._backend, "_host_texts", {}))}


# ============================================================================ loading
def is_relax_module(data: bytes) -> bool:
    """Whether ``data`` (a file's content, or its last bytes) ends with relay_ir's trailer."""
    return data.endswith(TRAILER_MAGIC)


def read_metadata(path: str) -> dict:
    """The verified metadata of a module file (entries, types, constructors, target)."""
    meta, _ = _verify(os.fspath(path), _read(os.fspath(path)))
    return meta


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ModuleFileError(f"{path}: no such module file") from None
    except IsADirectoryError:
        raise ModuleFileError(f"{path}: is a directory, not a module file") from None
    except OSError as e:
        raise ModuleFileError(f"{path}: cannot read the module file: {e.strerror or e}") \
            from None


def _verify(path: str, data: bytes) -> tuple[dict, bytes]:
    """(metadata, library bytes) of a module file, every check done (else ModuleFileError)."""
    if not data.endswith(TRAILER_MAGIC):
        if data.startswith(b"\x7fELF"):
            raise ModuleFileError(
                f"{path}: a shared library that does not end with relay_ir's trailer: a plain "
                f"shared library, a module file cut short (truncated), or one with bytes "
                f"appended; write module files with exe.export_library or `rly build`")
        if not data:
            raise ModuleFileError(f"{path}: the module file is empty")
        raise ModuleFileError(f"{path}: not a relay_ir module file (bad magic: no shared "
                              f"library with relay_ir's trailer)")
    if len(data) < _FOOTER.size:
        raise ModuleFileError(f"{path}: the module file is truncated ({len(data)} bytes)")
    version, _ = _TAIL.unpack_from(data, len(data) - _TAIL.size)
    if version != FORMAT_VERSION:
        raise ModuleFileError(f"{path}: module file format version {version}; this relay_ir "
                              f"reads version {FORMAT_VERSION} (rebuild it with rly build)")
    n = _FOOTER.size
    lsize, msize, lsum, msum, _, _ = _FOOTER.unpack_from(data, len(data) - n)
    if lsize + msize + n != len(data):
        raise ModuleFileError(f"{path}: the module file is corrupt or truncated ({len(data)} "
                              f"bytes; its trailer says {lsize + msize + n})")
    lib = data[:lsize]
    mtext = data[lsize:lsize + msize]
    if hashlib.sha256(lib).digest() != lsum or hashlib.sha256(mtext).digest() != msum:
        raise ModuleFileError(f"{path}: the module file is corrupt (checksum mismatch)")
    try:
        meta = json.loads(mtext.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ModuleFileError(f"{path}: the module metadata is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME or \
            meta.get("version") != FORMAT_VERSION:
        raise ModuleFileError(f"{path}: unknown module metadata format")
    return meta, lib


def load_module(path: str, target: Any = None) -> Any:
    """Load a module file written by ``export_library`` / ``rly build``: a
    :class:`LoadedRelaxModule`.

    A missing, truncated, corrupt, wrong-version or wrong-target file is a
    :class:`~relay_ir.runtime.vm.ModuleFileError` (a ``DiagnosticError``); nothing is handed
    to the dynamic loader before every check passed. A file of the old Python VM (magic
    ``RLYMOD``) is a ``ModuleFileError`` ("made by an older relay_ir; rebuild it").
    """
    from relay_ir.runtime import vm as vm_mod
    path = os.fspath(path)
    data = _read(path)
    if data.startswith(vm_mod.MAGIC) or (not is_relax_module(data) and
                                         vm_mod.MAGIC.startswith(data[:8]) and data):
        raise ModuleFileError(f"{path}: a module file made by an older relay_ir (its "
                              f"Python VM); rebuild it (rly build / export_library)")
    meta, lib = _verify(path, data)
    del data
    return _load(path, meta, lib)


def _load(path: str, meta: dict, lib: bytes, check_target: bool = True) -> LoadedRelaxModule:
    """The module of a verified file. ``check_target=False`` (the whole-build cache, whose
    key holds the target) skips checking the file's target against this machine and
    building its ``tvm.target.Target`` (built on first use of ``.target`` instead: the first
    Target of a process costs ~30-80 ms in TVM's FFI type checks)."""
    import tvm
    from relay_ir.runtime.lower_tvm import check_target_description, ensure_threads
    built = str(meta.get("tvm_version", "?"))
    if _tvm_release(built) != _tvm_release(tvm.__version__):
        raise ModuleFileError(f"{path}: the module was built with TVM {built}; this process "
                              f"has TVM {tvm.__version__}, whose bytecode and runtime may "
                              f"differ (rebuild it here)")
    tgt = None
    try:
        if check_target:
            tgt = check_target_description(meta["target"])
        kind = str(meta["target"]["config"]["kind"])
    except LoweringError as e:
        raise ModuleFileError(f"{path}: {e.message}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ModuleFileError(f"{path}: malformed target description ({e})") from None
    try:
        entries = {}
        for name, e in meta["entries"].items():
            shape_vars: dict = {}
            entries[str(name)] = ([_type_from_json(t, shape_vars) for t in e["types"]],
                                  [str(n) for n in e["names"]])
        cons = _constructors(meta["constructors"])
        default = str(meta["default_entry"])
        if default not in entries:
            raise ValueError(f"the default entry {default!r} is not an entry")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModuleFileError(f"{path}: malformed module metadata ({type(e).__name__}: "
                              f"{e})") from None
    hosts: list = []
    if meta.get("host_groups"):
        from relay_ir.runtime.relax_shapes import register_loaded_groups
        try:
            hosts = register_loaded_groups(dict(meta["host_groups"]))
        except (DiagnosticError, TypeError, ValueError, AttributeError) as e:
            raise ModuleFileError(f"{path}: malformed host group in the module metadata "
                                  f"({type(e).__name__}: {e})") from None
    ensure_threads()
    fd, tmp = tempfile.mkstemp(prefix="relay_ir_module_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        try:
            with _tvm_log_filtered():
                mod = tvm.runtime.load_module(tmp)
                if kind == "cuda":
                    from relay_ir.runtime.relax_cuda import devices
                    vm = tvm.relax.VirtualMachine(mod, devices())
                else:
                    vm = tvm.relax.VirtualMachine(mod, tvm.cpu())
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModuleFileError(f"{path}: cannot load the module's library: {msg}") \
                from None
    finally:
        os.remove(tmp)      # NOTE: the loaded library stays mapped
    loaded = LoadedRelaxModule(path, vm, mod, tgt, entries, cons, default, meta)
    loaded._host_groups = hosts        # alive as long as the module
    return loaded


def _constructors(table: list) -> list:
    from relay_ir.expr import Constructor
    from relay_ir.ty import GlobalTypeVar, TupleType
    heads: dict[str, Any] = {}
    out = []
    for tname, cname, tag, arity in table:
        head = heads.setdefault(str(tname), GlobalTypeVar(str(tname)))
        out.append(Constructor(str(cname), tuple(TupleType(()) for _ in range(int(arity))),
                               head, int(tag)))
    return out


class _LoadedBackend:
    """What the runner asks of a backend, for a loaded module (no program, no kernels)."""

    static_depth = False

    def alloc_error(self) -> DiagnosticError:
        return DiagnosticError("executor='relax': out of memory (an output of the loaded "
                               "module could not be allocated)")


class LoadedRelaxModule(RelaxExecutable):
    """A module file loaded by :func:`load_module`: ``m(*args, entry=None)`` runs an entry
    (numpy arrays, tuples, :class:`ADTValue`, :class:`RefValue` in and out; arguments checked
    against the entry's parameter types) on the Relax VM. Never compiles."""

    def __init__(self, path: str, vm: Any, library: Any, target: Any,
                 entries: dict[str, tuple[list, list[str]]], cons: list, default: str,
                 meta: dict):
        self.path = path
        self.module = None
        self.library = library          # the tvm.runtime.Module (kept alive with the VM)
        self.vm = vm
        self._target = target
        self.entry = self.default_entry = default
        self.metadata = meta
        self._entries = entries
        self._backend = _LoadedBackend()  # type: ignore[assignment]
        self._backend.static_depth = bool(meta.get("static_depth", False))
        self._cons = cons
        self.constructors = {c.name_hint: c for c in cons}
        self._init_state()

    @property
    def target(self) -> Any:
        """The ``tvm.target.Target`` the module was built for."""
        if self._target is None:
            from relay_ir.runtime.lower_tvm import check_target_description
            self._target = check_target_description(self.metadata["target"])
        return self._target

    def _is_cuda(self) -> bool:
        return str(self.metadata["target"]["config"].get("kind")) == "cuda"

    @property
    def globals(self) -> list[str]:
        """The entries of the module (its globals)."""
        return list(self._entries)

    def param_types(self, entry: str) -> list:
        """The parameter types of ``entry``."""
        return list(self._types(entry)[0])

    def _types(self, entry: str) -> tuple[list, list[str]]:
        got = self._entries.get(entry)
        if got is None:
            raise DiagnosticError(f"there is no global function @{entry}{self._where()} "
                                  f"(globals: {', '.join('@' + n for n in self._entries)})")
        return got

    def _where(self) -> str:
        """Where the entries come from, for messages (the module file)."""
        return f" in {self.path}"

    def _func(self, entry: str) -> Any:
        f = self._funcs.get(entry)
        if f is None:
            self._types(entry)
            f = self._funcs[entry] = self.vm[_ENTRY + entry]
        return f

    def _entry_types(self, entry: str) -> tuple[Any, list, list[str] | None]:
        ptypes, names = self._types(entry)
        return None, ptypes, names

    def num_compiled(self) -> int:
        return len(self.metadata.get("kernels", ()))

    def num_kernels(self) -> int:
        """The number of distinct kernels the file links (host groups not counted)."""
        return len(self.metadata.get("kernels", ()))

    def host_kernels(self) -> list[str]:
        """Labels of the groups that run on the host (carried as Relay text)."""
        return [f"host:{label}" for label, _ in self.metadata.get("host_groups", {}).values()]

    def kernel_sources(self) -> list[str]:
        """Nothing: a loaded shared library keeps no kernel source."""
        return []

    @property
    def cache(self) -> Any:
        return None         # NOTE: a loaded module never compiles

    def export_library(self, path: str, entry: str | None = None,
                       batched: bool = False) -> None:
        raise DiagnosticError("a loaded module cannot be exported again; export the "
                              "runtime.build result")


__all__ = ["export_library", "load_module", "read_metadata", "is_relax_module",
           "LoadedRelaxModule", "TRAILER_MAGIC", "FORMAT_VERSION", "ModuleFileError"]
