"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    true_f1, parity_gap, f1_lower = map(float, capsys.readouterr().out.split()[:3])
    assert 0.0 <= true_f1 <= 1.0
    assert f1_lower <= true_f1  # the surrogate is a lower bound of the true F-measure


def test_readme_starts_with_the_two_commands():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    assert first_block is not None
    commands = [ln.split("#")[0].strip() for ln in first_block.group(1).splitlines() if ln.strip()]
    assert commands == ["make train", "make test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci
