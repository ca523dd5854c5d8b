"""The compiled half of the client (Rust, pyo3). Private: use the `recalld` package."""

from os import PathLike
from typing import Any, Dict, Optional, Union, final

__version__: str
PROTOCOL_VERSION: int
MIN_PROTOCOL_VERSION: int
MAX_FRAME_BYTES: int
MAX_MEMORY_ID_BYTES: int

def encode(obj: Any, /) -> bytes:
    """MessagePack (named maps) of a JSON-shaped value: None, bool, int, float, str, list,
    tuple, dict with str keys. Raises TypeError for anything else."""

def decode(data: bytes, /) -> Any:
    """The value of one MessagePack body."""

@final
class Connection:
    """A blocking, thread-safe socket to the daemon; socket I/O releases the GIL."""

    @staticmethod
    def connect(path: Union[str, PathLike[str]], timeout: Optional[float] = None) -> Connection: ...
    def call(self, op: str, args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The reply's `ok` map; raises `recalld.RecalldError`."""
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
