"""Security of the proxy: TLS, authentication, access control, protected mode, audit.

docs/security.md describes the threat model and how each part works.
"""

from popmq.proxy.security.config import SecurityConfig
from popmq.proxy.security.model import (
    ANONYMOUS_SUPER,
    Action,
    Check,
    Decision,
    Pattern,
    Policy,
    Principal,
    Resource,
    ResourceType,
    User,
    UserType,
    current_principal,
    set_principal,
)

__all__ = [
    "ANONYMOUS_SUPER",
    "Action",
    "Check",
    "Decision",
    "Pattern",
    "Policy",
    "Principal",
    "Resource",
    "ResourceType",
    "SecurityConfig",
    "User",
    "UserType",
    "current_principal",
    "set_principal",
]
