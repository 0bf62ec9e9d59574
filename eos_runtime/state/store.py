"""A task's keyed state on RocksDB, with SEP-10's rule: nothing uncommitted reaches RocksDB.

A ``TaskStore`` owns one RocksDB directory. Each named store of the task is one column
family; one more family, ``__eos_meta``, holds the checkpoint data (SEP-10 "RocksDB
Checkpoint Data Format": the change-log offset, generation and version the state
corresponds to).

Rules this module keeps:

* **Staged, never written early.** ``put`` and ``delete`` only stage the change in
  memory (one dict per store, last write wins). ``get`` reads the staged change first
  (read your own writes), then RocksDB. SEP-10 uses a WriteBatchWithIndex for this;
  rocksdict has none, so the dicts are the index.
* **One commit point.** ``commit(checkpoint)`` writes every staged change *and* the
  encoded checkpoint data in one ``WriteBatch`` through ``Rdict.write``. RocksDB applies
  a batch whole or not at all, also across column families and across a crash, so the
  state on disk and its checkpoint data never disagree.
* **Every write to a store family carries checkpoint data.** ``commit`` and ``restore``
  both write it in the same batch, so a DB without checkpoint data holds no state. An
  interrupted ``wipe`` is the only way to break that, and opening such a DB finishes
  the wipe.
* **One owner.** RocksDB's LOCK file keeps a second instance (this process or another)
  out; it gets ``StateLocked`` naming the path.

Durability: writes go to the WAL without fsync by default (``sync=False``). The WAL
write is a ``write(2)`` into the kernel before ``commit`` returns, so a committed batch
survives SIGKILL of the process. A machine crash may lose the last batches, but never
half of one; the checkpoint data then points at an older change-log offset and
recovery replays the change log from there. ``sync=True`` fsyncs every commit.

Not thread-safe: one task, one thread.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from .. import faults
from ..errors import ConfigError, EosError, StateError, StateLocked, WireFormatError
from ..protocol.wire import CheckpointData, decode_checkpoint_data, encode
from .freed_memory import return_large_frees

__all__ = [
    "TaskStore",
    "StateError",
    "StateLocked",
    "META_FAMILY",
    "RESERVED_PREFIX",
    "CHECKPOINT_KEY",
]

RESERVED_PREFIX = "__eos"
META_FAMILY = "__eos_meta"          # the internal column family
CHECKPOINT_KEY = b"checkpoint"      # key of the checkpoint data in META_FAMILY
_DEFAULT_FAMILY = "default"         # RocksDB's own family; always there, never used here

_MISSING: Any = object()
_CHUNK = 1024                       # keys per RocksDB iterator in items()
#: Values of recent commits a store keeps in memory, in front of RocksDB. A committed key
#: read again soon (a counter, a session) is then a dict hit, not a RocksDB ``get``
#: (about 2 µs from Python at 10^5 keys, mostly the call and the memtable's skip list).
RECENT_KEPT = 65_536
#: ... and at most about this many bytes of keys and values: a store of large values
#: (sessions, windows) keeps fewer keys (as many as the last commit's mean size allows).
RECENT_BYTES = 8 << 20


class _Store:
    """One named store: its column family (reader + write handle), its staged changes and
    the values its recent commits wrote."""

    __slots__ = ("name", "cf", "handle", "staged", "recent")

    def __init__(self, name: str) -> None:
        self.name = name
        self.cf: Any = None          # rocksdict.Rdict bound to the family
        self.handle: Any = None      # rocksdict.ColumnFamily, for WriteBatch
        self.staged: dict[bytes, bytes | None] = {}   # None: staged delete
        # What RocksDB holds for these keys (None: deleted), from the last commits, oldest
        # first; at most ``recent_kept`` keys and about ``recent_bytes``. Only
        # commit adds to it; whatever else writes RocksDB (restore, wipe) empties it.
        self.recent: dict[bytes, bytes | None] = {}

    def remember(self, committed: dict[bytes, bytes | None], kept: int,
                 kept_bytes: int) -> None:
        """``committed`` (a commit's staged changes, now in RocksDB) joins ``recent``; the
        oldest go past ``kept`` keys, or past as many as ``kept_bytes`` holds of keys and
        values the size of ``committed``'s on average."""
        size = sum(map(len, committed)) + sum(map(len, filter(None, committed.values())))
        if size:
            kept = min(kept, kept_bytes * len(committed) // size)
        recent = self.recent
        if not recent:
            self.recent = recent = committed
        else:
            recent.update(committed)
        excess = len(recent) - kept
        if excess > 0:
            for key in list(itertools.islice(recent, excess)):
                del recent[key]


def _options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    return opts


#: The block cache a task's stores share (RocksDB's default size, but one for the task,
#: not one per column family).
BLOCK_CACHE_BYTES = 32 << 20
#: A store's memtables: at most this many of this size (writes not yet in an SST file).
MEMTABLE_BYTES = 64 << 20
MEMTABLES = 2


def _family_options(cache: rocksdict.Cache) -> rocksdict.Options:
    """A store's family, tuned for point reads (RocksDB's ``OptimizeForPointLookup``, with
    the task's one block cache): a stateful step reads one key per record, and at millions
    of keys a read that misses the memtable and the cache searched SST files. A Bloom
    filter per SST file and one over the memtable skip the files and the memtable that
    cannot hold the key (a new key, at 10^7 keys, is a third of the reads), and a hash
    index finds a key in its data block. Measured (a counter's read and write, 4.3 million
    keys, a few million writes): 8.2 -> 3.2 µs, for 10 bits a key of filter and 2 % of a
    memtable."""
    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    # The filters and index blocks stay outside the cache. Inside it (level 0's pinned),
    # a 10^7-key state-growth run went at a quarter of its speed: uniform reads likely
    # evicted them with the data blocks (docs/state.md, "Memory").
    table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
    table.set_data_block_hash_ratio(0.75)
    opts.set_block_based_table_factory(table)
    opts.set_memtable_prefix_bloom_ratio(0.02)
    opts.set_memtable_whole_key_filtering(True)
    # RocksDB's two 64 MiB memtables, stated: the bench's memory budget is made of them.
    # Kafka Streams' three of 16 MiB were faster for a few million writes, and slower
    # (3-8 % more CPU) over ten million, as compactions of the smaller files caught up.
    opts.set_write_buffer_size(MEMTABLE_BYTES)
    opts.set_max_write_buffer_number(MEMTABLES)
    return opts


def _check_store_names(stores: Sequence[str]) -> tuple[str, ...]:
    if isinstance(stores, str):
        raise ConfigError(f"stores must be a sequence of names, not the string {stores!r}")
    names = tuple(stores)
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"store names must be non-empty strings, not {name!r}")
        if name.startswith(RESERVED_PREFIX):
            raise ConfigError(f"store name {name!r}: names starting with {RESERVED_PREFIX!r} "
                              f"are reserved for the runtime")
        if name == _DEFAULT_FAMILY:
            raise ConfigError(f"store name {name!r} is RocksDB's own column family; "
                              f"choose another name")
        if name in seen:
            raise ConfigError(f"store {name!r} is declared twice")
        seen.add(name)
    return names


def _is_lock_error(exc: BaseException) -> bool:
    # rocksdict raises a bare Exception; RocksDB's texts are "IO error: While lock file:
    # <path>/LOCK: Resource temporarily unavailable" (another process holds the flock) and
    # "IO error: lock hold by current process, ... <path>/LOCK: No locks available" (this
    # process, another Rdict, which RocksDB tracks itself since flock would not tell).
    text = str(exc)
    return "While lock file:" in text or "lock hold by current process" in text


def _forked() -> None:
    for store in list(_open_stores):
        store._forked = True


_open_stores: weakref.WeakSet[TaskStore] = weakref.WeakSet()
faults.on_split(lambda: None, _forked)


class TaskStore:
    """State of one task: named stores (one RocksDB column family each), changes staged
    in memory until ``commit`` writes them with the checkpoint data in ONE atomic
    WriteBatch.

    ``stores`` are the names the task declares. Families found on disk that are not
    declared (a store the pipeline no longer has) are kept but not reachable; ``wipe``
    removes them.
    """

    def __init__(self, path: str | Path, stores: Sequence[str], *, sync: bool = False,
                 recent_kept: int = RECENT_KEPT, recent_bytes: int = RECENT_BYTES) -> None:
        self.path = str(path)
        self._recent_kept, self._recent_bytes = recent_kept, recent_bytes
        # before RocksDB's first memtable: its flushed blocks go back to the system
        return_large_frees()
        self._cache = rocksdict.Cache(BLOCK_CACHE_BYTES)
        self._forked = False             # in a fault-injection zombie: never close the DB
        _open_stores.add(self)
        self._names = _check_store_names(stores)
        self._stores: dict[str, _Store] = {}
        self._order: list[tuple[_Store, bytes]] = []   # first touch of each staged (store, key)
        # Since the last savepoint (None: none taken): what each overwrite of an already
        # staged key replaced, and how many keys were staged before it (``rollback``).
        self._undo: list[tuple[_Store, bytes, bytes | None]] | None = None
        self._mark = 0
        self._checkpoint: CheckpointData | None = None
        self._closed = False
        self._db: Any = None
        self._meta: Any = None
        self._meta_handle: Any = None
        self._extra: list[str] = []      # families on disk that no declared store uses
        self._write_opts = rocksdict.WriteOptions()
        self._write_opts.sync = bool(sync)
        self._sync_opts = rocksdict.WriteOptions()
        self._sync_opts.sync = True
        self._open()

    # ------------------------------------------------------------------ open / close

    def _open(self) -> None:
        try:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create the task state directory {self.path}: {exc}") from None
        families = set(self._names) | {META_FAMILY}
        if os.path.exists(os.path.join(self.path, "CURRENT")):
            try:
                families |= set(rocksdict.Rdict.list_cf(self.path))
            except Exception as exc:  # rocksdict raises bare Exception
                raise StateError(f"cannot list the column families of {self.path}: {exc}") from None
        families.discard(_DEFAULT_FAMILY)
        try:
            self._db = rocksdict.Rdict(self.path, _options(),
                                       column_families={f: _family_options(self._cache)
                                                        for f in families})
        except Exception as exc:
            if _is_lock_error(exc):
                raise StateLocked(self.path, str(exc)) from None
            raise StateError(f"cannot open the task state at {self.path}: {exc}") from None
        try:
            self._extra = sorted(families - set(self._names) - {META_FAMILY})
            self._bind()
            raw = self._meta.get(CHECKPOINT_KEY)
            if raw is None:
                # No checkpoint data means no state (every store write carries it): anything
                # found is the rest of an interrupted wipe, which is finished here.
                if self._extra or any(next(iter(s.cf.keys()), None) is not None
                                      for s in self._stores.values()):
                    self._drop_families()
            else:
                try:
                    self._checkpoint = decode_checkpoint_data(raw)
                except WireFormatError as exc:
                    raise StateError(
                        f"the checkpoint data in {self.path} does not decode ({exc.reason}); the "
                        f"state is unusable: TaskStore.destroy({self.path!r}) removes it so it "
                        f"can be rebuilt from the change log") from None
        except BaseException:
            self._release()
            raise

    def _bind(self) -> None:
        """(Re)take the family handles; after a family is dropped the old ones are stale."""
        db = self._db
        stores = self._stores or {name: _Store(name) for name in self._names}
        for store in stores.values():
            store.cf = db.get_column_family(store.name)
            store.handle = db.get_column_family_handle(store.name)
        self._stores = stores
        self._meta = db.get_column_family(META_FAMILY)
        self._meta_handle = db.get_column_family_handle(META_FAMILY)

    def _release(self) -> None:
        if self._forked:
            # RocksDB's background threads did not survive the split: closing waits on
            # them for ever. The zombie's process ends soon; its LOCK goes with it.
            for handle in (self._db, self._meta, self._meta_handle,
                           *(h for st in self._stores.values() for h in (st.cf, st.handle))):
                if handle is not None:
                    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))
            self._db = None
            return
        # rocksdict keeps the DB (and its LOCK) alive while any family reader or handle
        # lives, even after Rdict.close(): drop every reference, then close.
        for store in self._stores.values():
            store.cf = store.handle = None
            store.staged, store.recent = {}, {}
        self._order = []
        self._stores = {}
        self._meta = self._meta_handle = None
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception as exc:
                raise StateError(f"closing the task state at {self.path} failed: {exc}") from None

    def close(self) -> None:
        """Drop staged changes and close the DB (its LOCK is released). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def destroy(path: str | Path) -> None:
        """Remove a task state directory that is not open (e.g. one that no longer opens).

        Refuses with ``StateLocked`` while some process has it open."""
        path = str(path)
        if not os.path.exists(path):
            return
        try:
            rocksdict.Rdict.destroy(path, _options())
        except Exception as exc:
            if _is_lock_error(exc):
                raise StateLocked(path, str(exc)) from None
            raise StateError(f"cannot destroy the task state at {path}: {exc}") from None

    # ------------------------------------------------------------------ errors

    def _unknown(self, store: object) -> EosError:
        if self._closed:
            return StateError(f"the task state at {self.path} is closed")
        known = ", ".join(repr(n) for n in self._names) or "none"
        return ConfigError(f"unknown store {store!r} in the task state at {self.path}; "
                           f"known stores: {known}")

    @staticmethod
    def _not_bytes(store: str, what: str, obj: object) -> ConfigError:
        return ConfigError(f"store {store!r}: {what} must be bytes, not {type(obj).__name__}")

    # ------------------------------------------------------------------ staged access

    def get(self, store: str, key: bytes) -> bytes | None:
        """The staged value if there is one (None for a staged delete), else RocksDB's."""
        s = self._store_named(store)
        try:
            value = s.staged.get(key, _MISSING)
        except TypeError:  # unhashable key
            raise self._not_bytes(store, "key", key) from None
        if value is _MISSING:
            if not isinstance(key, bytes):
                raise self._not_bytes(store, "key", key)
            value = s.recent.get(key, _MISSING)
            if value is _MISSING:
                committed: bytes | None = s.cf.get(key)
                return committed
        staged: bytes | None = value
        return staged

    def put(self, store: str, key: bytes, value: bytes) -> None:
        self._stage(store, key, value, put=True)

    def delete(self, store: str, key: bytes) -> None:
        self._stage(store, key, None, put=False)

    def _stage(self, store: str, key: bytes, value: bytes | None, *, put: bool) -> None:
        """Stage a write (a delete: value None) until the next commit or discard."""
        s = self._store_named(store)
        if not isinstance(key, bytes):
            raise self._not_bytes(store, "key", key)
        if put and not isinstance(value, bytes):
            raise self._not_bytes(store, "value", value)
        staged = s.staged
        if key not in staged:
            self._order.append((s, key))
        elif self._undo is not None:
            self._undo.append((s, key, staged[key]))
        staged[key] = value

    def accessors(self, store: str) -> tuple[Callable[[bytes], bytes | None],
                                             Callable[[bytes, bytes], None],
                                             Callable[[bytes], None]]:
        """``get``, ``put`` and ``delete`` of one store, for a stateful step's ``State``:
        the same staging as the methods above, without their checks, which a per-record
        path pays for nothing (``State`` makes every key and value bytes itself)."""
        s = self._store_named(store)

        def get(key: bytes) -> bytes | None:
            value = s.staged.get(key, _MISSING)
            if value is _MISSING:
                value = s.recent.get(key, _MISSING)   # restore() replaces the dict
                if value is _MISSING:
                    committed: bytes | None = s.cf.get(key)
                    return committed
            staged: bytes | None = value
            return staged

        def stage(key: bytes, value: bytes | None) -> None:
            staged = s.staged   # discard() replaces the dict, and close() the handle
            if key not in staged:
                self._order.append((s, key))
            elif self._undo is not None:
                self._undo.append((s, key, staged[key]))
            staged[key] = value

        def delete(key: bytes) -> None:
            stage(key, None)

        return get, stage, delete

    def _store_named(self, store: str) -> _Store:
        try:
            return self._stores[store]
        except KeyError:
            raise self._unknown(store) from None

    def staged(self) -> list[tuple[str, bytes, bytes | None]]:
        """Changes since the last commit/discard: one per (store, key), last write wins,
        in first-touch order; value None is a delete. (What goes to the change log.)"""
        return [(s.name, key, s.staged[key]) for s, key in self._order]

    def staged_by_store(self) -> list[tuple[str, list[bytes], list[bytes | None]]]:
        """``staged`` as (store, keys, values) per store with changes: the change log's
        batch records take them as they are, without a tuple per change."""
        return [(s.name, list(s.staged), list(s.staged.values()))
                for s in self._stores.values() if s.staged]

    @property
    def dirty(self) -> bool:
        """True when there are staged changes."""
        return bool(self._order)

    @property
    def stores(self) -> tuple[str, ...]:
        return self._names

    def discard(self) -> None:
        """Drop every staged change (SEP-10 4.3: restore / abort)."""
        for s in self._stores.values():
            if s.staged:
                s.staged = {}
        self._order = []
        self._undo, self._mark = None, 0

    def savepoint(self) -> None:
        """Mark the staged changes as they are now: ``rollback`` takes the staging back to
        here, until the next savepoint, commit or discard. A record's state writes are
        all or nothing: the record path takes one before each record whose failure it
        sets aside (dead letters), and rolls back when it fails."""
        self._mark = len(self._order)
        self._undo = []

    def rollback(self) -> None:
        """Undo every change staged since the last ``savepoint`` (one that overwrote an
        earlier staged change gives it back); the savepoint stays."""
        undo = self._undo
        if undo is None:
            raise StateError(f"rollback of the task state at {self.path} without a savepoint")
        for s, key, value in reversed(undo):
            s.staged[key] = value
        undo.clear()
        order, mark = self._order, self._mark
        for s, key in order[mark:]:   # first staged since the savepoint
            del s.staged[key]
        del order[mark:]

    # ------------------------------------------------------------------ commit point

    def _encode_checkpoint(self, checkpoint: CheckpointData) -> bytes:
        if not isinstance(checkpoint, CheckpointData):
            raise ConfigError(f"checkpoint must be a CheckpointData, "
                              f"not {type(checkpoint).__name__}")
        try:
            return encode(checkpoint)
        except ValueError as exc:
            raise ConfigError(f"checkpoint data {checkpoint!r} cannot be stored: {exc}") from None

    def _write(self, batch: Any, what: str, opts: Any = None) -> None:
        try:
            self._db.write(batch, self._write_opts if opts is None else opts)
        except Exception as exc:
            raise StateError(f"RocksDB write of the {what} at {self.path} failed "
                             f"(nothing of it was applied): {exc}") from None

    def commit(self, checkpoint: CheckpointData) -> None:
        """SEP-10 3.6 + 3.7: the staged changes and the checkpoint data, one atomic batch.

        On success the staging is empty. On failure (StateError) nothing was written and
        the staged changes are kept."""
        if self._closed:
            raise self._unknown(None)
        # 1. encode the checkpoint data first: a bad record fails before anything is built
        raw = self._encode_checkpoint(checkpoint)
        # 2. one batch: every staged change of every store, in its family, in key order:
        # RocksDB's memtable inserts a sorted run near where the last key went (measured,
        # 24 000 changes of 500 000 keys: 2.5 -> 1.4 µs a change, the sort included)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for s in self._stores.values():
            staged = s.staged
            if not staged:
                continue
            batch.set_default_column_family(s.handle)
            put, delete = batch.put, batch.delete
            for key in sorted(staged):
                value = staged[key]
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        # 3. the checkpoint data in the same batch, in the meta family
        batch.set_default_column_family(self._meta_handle)
        batch.put(CHECKPOINT_KEY, raw)
        # 4. the commit point: one Rdict.write (WAL, then memtables)
        self._write(batch, "commit batch")
        # 5. only now: the staging is history, its values the recent ones
        self._checkpoint = checkpoint
        for s in self._stores.values():
            if s.staged:
                s.remember(s.staged, self._recent_kept, self._recent_bytes)
        self.discard()

    def checkpoint_data(self) -> CheckpointData | None:
        """What the last commit/restore wrote; None for a fresh (or wiped) store."""
        return self._checkpoint

    # ------------------------------------------------------------------ recovery

    def restore(self, changes: Iterable[tuple[str, bytes, bytes | None]],
                checkpoint: CheckpointData, *, replace: bool = False) -> None:
        """Apply committed changes read from the change log, and the checkpoint data they
        bring the state to, in one atomic batch (value None: delete).

        The caller feeds the change log in calls that each end at a commit message
        (``checkpoint.changelog_offset``), so every call leaves a consistent store.
        ``replace``: the changes are a snapshot of the whole state (rule C7); the state
        is wiped first (a crash in between leaves a store without checkpoint data, which
        recovery rebuilds). Refused while changes are staged."""
        if self._closed:
            raise self._unknown(None)
        if self._order:
            raise StateError(f"restore into the task state at {self.path} with "
                             f"{len(self._order)} staged changes; discard() them first")
        raw = self._encode_checkpoint(checkpoint)
        if replace:
            self.wipe()
        stores = self._stores
        self._forget_recent()
        batch = rocksdict.WriteBatch(raw_mode=True)
        current: _Store | None = None
        for change in changes:
            try:
                store, key, value = change
            except (TypeError, ValueError):
                raise ConfigError(f"a change must be (store, key, value), not {change!r}") from None
            if current is None or store != current.name:
                try:
                    current = stores[store]
                except (KeyError, TypeError):
                    raise self._unknown(store) from None
                batch.set_default_column_family(current.handle)
            if not isinstance(key, bytes):
                raise self._not_bytes(store, "key", key)
            if value is None:
                batch.delete(key)
            elif isinstance(value, bytes):
                batch.put(key, value)
            else:
                raise self._not_bytes(store, "value", value)
        batch.set_default_column_family(self._meta_handle)
        batch.put(CHECKPOINT_KEY, raw)
        self._write(batch, "restore batch")
        self._checkpoint = checkpoint

    def _forget_recent(self) -> None:
        for store in self._stores.values():
            store.recent = {}

    def _drop_families(self) -> None:
        db = self._db
        self._forget_recent()
        for store in self._stores.values():
            store.cf = store.handle = None
        for name in (*self._names, *self._extra):
            db.drop_column_family(name)
        for name in self._names:
            db.create_column_family(name, _family_options(self._cache))
        self._extra = []
        self._bind()

    def wipe(self) -> None:
        """Remove all state and the checkpoint data (a lost or unsure local store, to be
        rebuilt from the change log). Staged changes are dropped too.

        Crash-safe: first the checkpoint data goes (fsynced), then each store's family
        is dropped and recreated. A crash in between leaves a DB without checkpoint data,
        which the next open empties."""
        if self._closed:
            raise self._unknown(None)
        self.discard()
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete(CHECKPOINT_KEY, self._meta_handle)
        self._write(batch, "wipe", self._sync_opts)
        self._checkpoint = None
        try:
            self._drop_families()
        except Exception as exc:
            raise StateError(f"wiping the task state at {self.path} failed: {exc}") from None

    # ------------------------------------------------------------------ inspection

    def items(self, store: str) -> Iterator[tuple[bytes, bytes]]:
        """Committed state overlaid with the staged changes, sorted by key.

        For tests and inspection. The staged changes are taken when called; the committed
        side is read in chunks of ``_CHUNK`` keys, so no RocksDB iterator (which would keep
        the DB and its LOCK alive after ``close``) outlives a chunk, and a commit made while
        iterating may show in the later chunks."""
        s = self._store_named(store)
        staged = sorted(s.staged.items())
        return _merge(self._committed(s), staged)

    def _committed(self, s: _Store) -> Iterator[tuple[bytes, bytes]]:
        after: bytes | None = None
        while True:
            cf = s.cf
            if cf is None:  # closed or wiped meanwhile
                return
            it = cf.items() if after is None else cf.items(from_key=after)
            chunk = list(itertools.islice(it, _CHUNK + 1))
            del it, cf
            if after is not None and chunk and chunk[0][0] == after:
                chunk = chunk[1:]
            else:
                chunk = chunk[:_CHUNK]
            if not chunk:
                return
            yield from chunk
            after = chunk[-1][0]


def _merge(committed: Iterator[tuple[bytes, bytes]],
           staged: list[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes, bytes]]:
    i, n = 0, len(staged)
    for key, value in committed:
        while i < n and staged[i][0] < key:
            skey, sval = staged[i]
            i += 1
            if sval is not None:
                yield skey, sval
        if i < n and staged[i][0] == key:
            sval = staged[i][1]
            i += 1
            if sval is not None:
                yield key, sval
            continue
        yield key, value
    for skey, sval in staged[i:]:
        if sval is not None:
            yield skey, sval
