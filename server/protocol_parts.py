"""The seam between the server and the protocol parts it wires together (conversion, codecs, encoding,
stream processing, constraints). They are imported here, once; if one is missing from an installation the
server still starts and the generation routes answer 503 naming the missing part.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from recipe.server.errors import ApiError

_MODULES = {
    "codec": "recipe.codec",
    "errors": "recipe.errors",
    "encoding": "recipe.encoding",
    "stream": "recipe.stream",
    "updates": "recipe.stream.updates",
    "constraints": "recipe.constraints",
    "chatml": "recipe.codecs.chatml",
    "deepseek_v4": "recipe.codecs.deepseek_v4",
    "deepseek_v41": "recipe.codecs.deepseek_v41",
    "deepseek_r1": "recipe.codecs.deepseek_r1",
}


@dataclass(frozen=True)
class ProtocolParts:
    """The imported modules by role; `missing` maps a role to why it could not be imported."""

    modules: dict[str, ModuleType]
    missing: dict[str, str]

    def require(self, *roles: str) -> None:
        absent = [f"{_MODULES[r]} ({self.missing[r]})" for r in roles if r in self.missing]
        if absent:
            raise ApiError(503, "This server was built without a required part: " + "; ".join(absent))

    def __getattr__(self, role: str) -> ModuleType:
        try:
            return self.modules[role]
        except KeyError:
            raise AttributeError(role) from None


def load_protocol_parts() -> ProtocolParts:
    modules: dict[str, ModuleType] = {}
    missing: dict[str, str] = {}
    for role, name in _MODULES.items():
        try:
            modules[role] = importlib.import_module(name)
        except ImportError as exc:
            missing[role] = str(exc)
    return ProtocolParts(modules, missing)
