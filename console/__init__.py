"""popmq's web console: the pages operators look at, live, as the API's own users.

`popmq serve` and `popmq proxy` serve it in their own event loop when `[console] listen`
is set (docs/console.md): an overview with health and live rates; topics, their messages
(browsed without consuming, looked up, a test message); groups with their lag, offsets
and dead letters; transactions; users and policies. Every action runs as the logged-in
user through the gRPC path (the gate's access control, the admin servicer, its audit
line).

Modules: `config` (`[console]`), `server` (uvicorn in the loop, protected mode, TLS),
`app` (the overview, topics, the live stream, the request rules), `groups`, `messages`,
`transactions`, `users` (their pages), `forms` (input checks), `actions` (admin methods
as a user), `sessions` (logins, the login-failure limit), `history` (the sampled rates).
"""

from popmq.console.config import ConsoleConfig
from popmq.console.server import ConsoleServer

__all__ = ["ConsoleConfig", "ConsoleServer"]
