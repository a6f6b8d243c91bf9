"""scripts/docs.sh is a check that can fail: a site whose build warns (a broken anchor, a link to
nothing) fails it, as `--strict` promises. Built on a two-page scratch site, not the real docs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """site_name: scratch
docs_dir: docs
strict: true
validation: {omitted_files: warn, absolute_links: warn, unrecognized_links: warn, anchors: warn}
nav: [index.md, other.md]
"""


def scratch_site(tmp_path: Path, link: str) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs.sh", tmp_path / "scripts" / "docs.sh")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "mkdocs.yml").write_text(CONFIG)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Home\n\n## A section\n\nSee [there]({link}).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Its section\n")
    return tmp_path


def docs_sh(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(site / "scripts" / "docs.sh")], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("link", "warning"), [
    ("#no-such-section", "no such anchor"),
    ("other.md#no-such-section", "does not contain an anchor"),
    ("folder/", "unrecognized relative link"),
])
def test_a_warning_fails_the_docs_check(tmp_path: Path, link: str, warning: str) -> None:
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv with mkdocs in this checkout")
    result = docs_sh(scratch_site(tmp_path, link))
    assert result.returncode != 0, result
    assert warning in result.stdout + result.stderr


def test_a_clean_site_passes_the_docs_check(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv with mkdocs in this checkout")
    result = docs_sh(scratch_site(tmp_path, "other.md#its-section"))
    assert result.returncode == 0, result.stdout + result.stderr
