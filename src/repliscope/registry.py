"""A registry per plugin kind, keyed by the exact word used in manifests and on the command line.

Lazy targets (``"module:attr"``) keep ``import repliscope`` free of ML frameworks; a duplicate name is an
error and an unknown name suggests close matches. A registry whose entries are registered by importing other
modules names them as ``providers``: they are imported on the registry's first read, so its contents never depend
on what happened to be imported before (``names()``, ``get``, ``in`` and iteration all see every entry).
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from repliscope.errors import RepliscopeError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to plugin objects (usually classes), registered eagerly or as lazy ``module:attr``."""

    def __init__(self, kind: str, providers: Iterable[str] | Callable[[], Iterable[str]] = ()) -> None:
        """``providers``: the modules whose import registers entries here (or a function returning them, called
        on first read), imported before the registry is first read."""
        self.kind = kind
        self._items: dict[str, T | str] = {}
        self._providers = providers
        self._complete = not providers
        self._importing = False
        self._lock = threading.RLock()

    def _ensure_complete(self) -> None:
        """Import the providers once (an import that fails is an error naming the module: a broken install).

        Threads reading a registry for the first time at once (a fresh service's first requests) wait for the one
        importing the providers instead of reading it half filled; a provider reading its own registry while it is
        being imported (same thread) sees what is registered so far."""
        if self._complete:
            return
        with self._lock:
            if self._complete or self._importing:
                return
            self._importing = True
            try:
                modules = self._providers() if callable(self._providers) else self._providers
                for module in modules:
                    try:
                        importlib.import_module(module)
                    except ImportError as exc:
                        raise RepliscopeError(
                            f"{self.kind} registry: importing its provider {module} failed: {exc}"
                        ) from exc
                self._complete = True  # only now: a failed import is tried again (and reported) on the next read
            finally:
                self._importing = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REG.register("resize")`` on a class or function."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T | str) -> None:
        """Add ``obj`` (or a lazy ``"module:attr"`` string) under ``name``; duplicates are an error."""
        existing = self._items.get(name)
        if existing is not None and existing is not obj:
            # a lazy target being imported registers itself: accept when it is the same object
            if isinstance(existing, str) and not isinstance(obj, str) and self._load(name, existing) is obj:
                self._items[name] = obj
                return
            raise RepliscopeError(f"{self.kind} '{name}' is already registered")
        self._items[name] = obj

    def get(self, name: str) -> T:
        """Return the plugin for ``name``, importing a lazy target on first use."""
        if name not in self._items:
            self._ensure_complete()
        if name not in self._items:
            raise UnknownNameError(
                self.kind, name, self._items, difflib.get_close_matches(name, list(self._items), n=3)
            )
        item = self._items[name]
        if isinstance(item, str):
            loaded = self._load(name, item)
            self._items[name] = loaded
            return loaded
        return item

    def _load(self, name: str, target: str) -> T:
        module, _, attr = target.partition(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise RepliscopeError(
                f"{self.kind} '{name}' needs a package that is not installed: {exc}. "
                f"Install the matching extra, e.g. pip install 'repliscope[...]'"
            ) from exc
        obj: T = getattr(mod, attr)
        return obj

    def names(self) -> list[str]:
        self._ensure_complete()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._ensure_complete()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
