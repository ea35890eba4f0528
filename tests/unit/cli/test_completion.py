"""``tierd completion bash|zsh``: the script each shell loads, and what bash then completes.

Bash runs the script and its completion function as it would on Tab (``COMP_WORDS`` set to
the line typed so far); zsh loads it the two ways the help gives (from ``$fpath``, by
``eval``). zsh is installed by ``.ci/run``.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from tierd.cli.main import main

#: Bash: the function the script registers for ``tierd``, called on each line given as arguments.
COMPLETE = r"""
source "$1"; shift
function=$(complete -p tierd | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
for line in "$@"; do
  read -ra COMP_WORDS <<< "$line"
  [[ $line == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE=$line; COMP_POINT=${#line}; COMPREPLY=()
  "$function" tierd "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
  printf '%s\n' "${COMPREPLY[@]}" | sort | paste -sd ' '
done
"""


def _script(shell: str, tmp_path: Path) -> Path:
    """What ``tierd completion SHELL`` prints, in a file."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["completion", shell]) == 0
    path = tmp_path / f"tierd.{shell}"
    path.write_text(printed.getvalue())
    return path


def test_bash_completes_commands_options_choices_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script("bash", tmp_path)
    (tmp_path / "tierd.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    lines = {
        "tierd re": "release reserve restore retention",
        "tierd db ": "check upgrade",
        "tierd retention plan --action ": "blocked delete keep",
        "tierd restore --to-": "--to-tier0",
        "tierd ls --tok": "--token --token-file",
        "tierd completion ": "bash zsh",
        "tierd ls --config tierd.y": "tierd.yaml",
    }
    done = subprocess.run(
        ["bash", "-c", COMPLETE, "complete", str(script), *lines],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert dict(zip(lines, done.stdout.splitlines(), strict=True)) == lines


def test_zsh_loads_it_from_fpath_and_by_eval(tmp_path: Path) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (.ci/run installs it)")
    script = _script("zsh", tmp_path)
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "_tierd").write_text(script.read_text())
    check = (
        # compinit reads every directory of $fpath: not the other systems' completions (2 s)
        f"fpath=({functions} ${{fpath:#*/Completion/*}} ${{(M)fpath:#*/Completion/Base}}); "
        f"autoload -Uz compinit; compinit -u -d {tmp_path}/zcompdump; "
        "print -r -- from-fpath=$_comps[tierd]; "
        f'unset "_comps[tierd]"; eval "$(<{script})"; print -r -- by-eval=$_comps[tierd]'
    )
    assert subprocess.run(["zsh", "-n", str(script)], timeout=60).returncode == 0
    done = subprocess.run(["zsh", "-f", "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["from-fpath=_tierd", "by-eval=_shtab_tierd"]
