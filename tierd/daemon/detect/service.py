"""The watcher service: watches the configured roots for checkpoint activity."""

from __future__ import annotations

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from tierd.daemon.context import Context
from tierd.logs import get_logger

__all__ = ["DetectService"]

log = get_logger(__name__)


class _LogHandler(FileSystemEventHandler):
    def on_any_event(self, event: FileSystemEvent) -> None:
        log.debug("fs_event", kind=event.event_type, path=str(event.src_path))


class DetectService:
    """Watches every configured root (recursively) with watchdog."""

    name = "detect"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._observer: BaseObserver | None = None

    async def start(self) -> None:
        """Create the watched roots if needed and start the observer thread."""
        observer = Observer()
        for watch in self.ctx.config.watch:
            watch.path.mkdir(parents=True, exist_ok=True)
            observer.schedule(_LogHandler(), str(watch.path), recursive=True)
        observer.start()
        self._observer = observer
        self.ctx.watcher_running = True
        log.info("watching", roots=[str(w.path) for w in self.ctx.config.watch])

    async def stop(self, timeout: float) -> None:
        """Stop the observer thread."""
        self.ctx.watcher_running = False
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=max(timeout, 1))
