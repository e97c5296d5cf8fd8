"""popmq's web console: the pages operators look at, live, as the API's own users.

`popmq serve` and `popmq proxy` serve it in their own event loop when `[console] listen`
is set (docs/console.md): an overview with health and live rates, a topics list with
search, pages, create and delete. Every action runs as the logged-in user through the
gRPC admin path (the gate's access control, the admin servicer, its audit line).

Modules: `config` (`[console]`), `server` (uvicorn in the loop, protected mode, TLS),
`app` (pages, forms, the live stream, the request rules), `actions` (admin methods as a
user), `sessions` (logins, the login-failure limit), `history` (the sampled rates).
"""

from popmq.console.config import ConsoleConfig
from popmq.console.server import ConsoleServer

__all__ = ["ConsoleConfig", "ConsoleServer"]
