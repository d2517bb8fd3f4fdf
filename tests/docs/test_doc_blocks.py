"""The docs' convention, read from small pages written here: which blocks run, where, and how."""

from __future__ import annotations

import subprocess

import pytest
from tests.docs.doc_blocks import DocFormatError, bash_commands, bash_script, read_blocks

PAGE = """# A page

```bash
ocrr run --dataset demo \\
    --seeds 0   # continued
# a comment line
make test
make docs
```

<!-- not-run: needs the Banking77 files -->
```bash
ocrr run --dataset banking77
```

<!-- run-in: shared -->

```python
print("hello")
```

<!-- run-in: shared -->
```python title="mod.py"
X = 1
```

```console
$ ocrr run
```

1. A list item:

    ```bash
    ocrr protocols
    ```
"""


def page(tmp_path, text=PAGE):
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return read_blocks(path)


def test_each_block_gets_its_action_language_and_folder(tmp_path):
    blocks = page(tmp_path)
    assert [(b.language, b.action) for b in blocks] == [
        ("bash", "run"),
        ("bash", "skip"),
        ("python", "run"),
        ("python", "save"),
        ("console", "ignore"),
        ("bash", "run"),
    ]
    first, skipped, python, saved, _, indented = blocks
    assert first.commands == ["ocrr run --dataset demo      --seeds 0   # continued"]
    assert first.make_lines == ["make test", "make docs"]
    assert skipped.not_run == "needs the Banking77 files"
    assert python.run_in == "shared" and saved.run_in == "shared"  # a blank line between is allowed
    assert saved.title == "mod.py" and saved.text == "X = 1\n"
    assert indented.commands == ["ocrr protocols"] and indented.line == 33


def test_pages_that_break_the_convention_are_refused(tmp_path):
    with pytest.raises(DocFormatError, match="never closed"):
        page(tmp_path, "```bash\nocrr run\n")
    with pytest.raises(DocFormatError, match="needs a reason"):
        page(tmp_path, "<!-- not-run: -->\n```bash\nocrr run\n```\n")
    with pytest.raises(DocFormatError, match="heredoc"):
        bash_commands("cat > f <<EOF\nx\nEOF\n", "page.md:1")


def test_the_script_stops_at_the_first_failing_command_and_names_it():
    script = bash_script(["echo one", "false", "echo never"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout == "one\n"
    assert "this command failed (exit 1): false" in done.stderr
    piped = subprocess.run(["bash", "-c", bash_script(["false | cat", "echo never"])], capture_output=True, text=True)
    assert piped.returncode == 1 and piped.stdout == ""  # pipefail: a failure inside a pipe counts
