"""The contract sources orgmem knows, by name (services/connectors/contract.py says what one is).

Each is loaded when a run names it, so a source's extraction libraries cost only the runs that
use it. Adding a source: its module here, one line below, its tests under
tests/unit/connectors/sources/.
"""

from __future__ import annotations

import importlib

from services.connectors.contract import Source
from services.errors import Invalid

# name -> (module, class, what the CLI's help says it reads, its deletion policy by default)
SOURCES: dict[str, tuple[str, str, str, str]] = {
    "slack": ("services.connectors.sources.slack", "SlackSource",
              "a Slack workspace export (.zip or its folder)", "erase"),
    "mattermost": ("services.connectors.sources.mattermost", "MattermostSource",
                   "a Mattermost bulk export (the mmctl export .zip or a folder holding its .jsonl)", "erase"),
    "teams": ("services.connectors.sources.teams", "TeamsSource",
              "a Microsoft Teams export of Graph JSON (teams/ and chats/ folders, or their .zip)", "erase"),
    "documents": ("services.connectors.sources.documents", "DocumentsSource",
                  "a documents export: a folder or .zip of Markdown/HTML/text/Office/PDF files, a Confluence space "
                  "export (HTML or XML) or a Notion export", "mark"),
}

DELETION_POLICIES = ("erase", "mark")


def source_named(name: str) -> Source:
    try:
        module, cls, _, _ = SOURCES[name]
    except KeyError:
        raise Invalid(f"connector: unknown source {name!r} (known: {', '.join(sorted(SOURCES))})") from None
    return getattr(importlib.import_module(module), cls)()


def default_policy(name: str) -> str:
    return SOURCES[name][3] if name in SOURCES else "mark"
