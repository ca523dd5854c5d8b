"""recalld: the Python client for the recalld memory sidecar.

Wrap every model call in two calls to the daemon::

    import recalld

    with recalld.Client() as memory:
        out = memory.decorate("conv-1", request)          # request: what create(**request) takes
        reply = openai_client.chat.completions.create(**out["request"])
        result = memory.report("conv-1", reply.model_dump())

Or give an OpenAI or Anthropic SDK client memory in one line (see `wrap`)::

    client = recalld.wrap(openai.OpenAI(), memory="conv-1")
    reply = client.chat.completions.create(model="gpt-4o", messages=history)

Requests and replies are plain dicts. `AsyncClient` is the same API for asyncio. Every failure
is a `RecalldError` with a stable `.code`; a failed socket is `RecalldConnectionError`.
"""

from . import _native
from ._args import default_socket, to_unix_seconds
from ._async import AsyncClient
from ._client import Client
from ._wrap import Options, wrap
from ._errors import (
    ERROR_CODES,
    ConflictError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ProtocolError,
    RecalldConnectionError,
    RecalldError,
    RecalldTimeoutError,
    ResourceExhaustedError,
    UnavailableError,
)

__version__: str = _native.__version__
PROTOCOL_VERSION: int = _native.PROTOCOL_VERSION

__all__ = [
    "__version__",
    "PROTOCOL_VERSION",
    "Client",
    "AsyncClient",
    "wrap",
    "Options",
    "default_socket",
    "to_unix_seconds",
    "ERROR_CODES",
    "RecalldError",
    "RecalldConnectionError",
    "RecalldTimeoutError",
    "ProtocolError",
    "InvalidArgumentError",
    "NotFoundError",
    "ConflictError",
    "ResourceExhaustedError",
    "UnavailableError",
    "InternalError",
]
