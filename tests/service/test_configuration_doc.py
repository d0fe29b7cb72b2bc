"""docs/configuration.md lists every setting: each field of the service settings and of the
spec limits with its environment variable, and each environment variable the client reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nas import SpecLimits
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


@pytest.mark.parametrize(
    ("fields", "prefix"),
    [(Settings.model_fields, "PREFLIGHT_"), (SpecLimits.model_fields, "PREFLIGHT_SPEC_")],
    ids=["service", "spec-limits"],
)
def test_every_setting_is_documented_with_its_env_var(fields: dict[str, object], prefix: str) -> None:
    text = PAGE.read_text()
    missing = [name for name in fields if f"| `{name}` | `{prefix}{name.upper()}` |" not in text]
    assert not missing, f"docs/configuration.md lacks rows for {missing}"


def test_every_env_var_the_client_reads_is_documented() -> None:
    source = (ROOT / "nas" / "client.py").read_text()
    read = set(re.findall(r"""(?:environ\.get|getenv)\(\s*["'](PREFLIGHT_\w+)["']""", source))
    assert read, "the client reads no PREFLIGHT_* variable any more: update this test"
    text = PAGE.read_text()
    assert not [name for name in sorted(read) if f"`{name}`" not in text]


def test_the_service_page_links_the_configuration_page() -> None:
    assert "(configuration.md)" in (ROOT / "docs" / "service.md").read_text()
