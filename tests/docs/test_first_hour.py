"""What a new user meets first: the README's install steps and `make setup` say what they do."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_recipe() -> list[str]:
    """The lines of the Makefile rule that `make setup` runs (the install stamp's recipe)."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(STAMP):"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_make_setup_shows_progress():
    """pip --quiet kept a new user looking at a silent terminal for minutes."""
    recipe = _setup_recipe()
    assert any("pip install" in line for line in recipe)
    assert not any("--quiet" in line or re.search(r"\s-q\b", line) for line in recipe), recipe


def test_the_readme_says_how_to_reach_ocrr_after_make_setup():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("make setup") : readme.index("## The two commands")]
    assert "source .venv/bin/activate" in install and ".venv/bin/ocrr" in install


def test_the_readme_says_which_torch_make_setup_installs():
    """The Makefile's default TORCH is what the README says `make setup` installs."""
    torch = re.search(r"^TORCH\s*\?=\s*(.+)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert torch is not None
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("make setup") : readme.index("## The two commands")]
    assert torch.group(1).strip() in install
    if "--index-url" not in torch.group(1):  # the default is PyPI's wheel, not the CPU build
        assert "the CPU build of PyTorch, then ocrr" not in install.split("\n\n")[0]


def test_the_readme_serves_the_ledger_it_wrote():
    """The service section's snippet writes quickstart.db; serving that file must not ask --fit to seed it
    (--fit seeds only an empty ledger: it would do nothing)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    service = readme[readme.index("## The substrate as a service") : readme.index("## Documentation")]
    serve = next(line for line in service.splitlines() if line.startswith("ocrr serve "))
    assert "--ledger quickstart.db" in serve and "--fit" not in serve
