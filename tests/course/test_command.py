"""One command for the course's tools: python -m encoderlab TOOL (and the console script)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from encoderlab import __main__ as command

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_tool_it_lists_them(capsys):
    assert command.main([]) == 2
    out = capsys.readouterr().out
    for tool in command.TOOLS:
        assert f"    {tool} " in out, tool


def test_help_lists_the_tools_and_succeeds(capsys):
    assert command.main(["--help"]) == 0
    assert "python -m encoderlab TOOL" in capsys.readouterr().out


def test_an_unknown_tool_says_which_exist(capsys):
    assert command.main(["benchmark"]) == 2
    err = capsys.readouterr().err
    assert "unknown tool 'benchmark'" in err and "bench, train" in err


@pytest.mark.parametrize("tool", sorted(command.TOOLS))
def test_every_tool_answers_help_under_its_command_name(tool, capsys):
    with pytest.raises(SystemExit) as exit_:
        command.main([tool, "--help"])
    assert exit_.value.code == 0
    assert f"python -m encoderlab {tool}" in capsys.readouterr().out


def test_the_tools_are_reached_through_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "encoderlab", "train", "--list"],
                         capture_output=True, text=True, check=True).stdout
    assert "l5-mlm" in out and "l8-contrastive" in out


def test_the_console_script_is_the_same_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"encoderlab": "encoderlab.__main__:main"}
